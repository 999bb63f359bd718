"""Where privcal finds the shared real data and where it caches what it builds.

* :func:`shared_data_dir` locates the read-only folder of real classifier outputs
  (``shared/data`` beside the repository, described by its ``README.md``).
* :func:`cache_dir` is the folder for data sets privcal builds itself (for example
  :func:`privcal.data.digits_shift`).

Both honour an environment variable first, so tests and CI can point them elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

__all__ = ["CACHE_ENV", "SHARED_DATA_ENV", "cache_dir", "shared_data_dir"]

#: Environment variable that names the shared data folder explicitly.
SHARED_DATA_ENV = "PRIVCAL_SHARED_DATA"
#: Environment variable that overrides the cache folder.
CACHE_ENV = "PRIVCAL_CACHE_DIR"


def _walk_up(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None


def shared_data_dir() -> Path | None:
    """The folder of shared real classifier outputs, or ``None`` if there is none.

    Resolution order:

    1. ``$PRIVCAL_SHARED_DATA`` when set and non-empty: that folder if it exists, else ``None``
       (an explicit setting is never silently replaced by a guess);
    2. ``<ancestor>/shared/data`` for the nearest ancestor of this file that has one (in a
       checkout at ``<root>/main`` this is ``<root>/shared/data``, i.e. ``<repo>/../shared/data``);
    3. the same search from the current working directory.

    Returns
    -------
    pathlib.Path or None
        An absolute path to an existing folder, or ``None`` when the data are absent (tests that
        need them skip).
    """
    env = os.environ.get(SHARED_DATA_ENV, "")
    if env:
        path = Path(env).expanduser().resolve()
        return path if path.is_dir() else None
    for start in (Path(__file__).resolve().parent, Path.cwd().resolve()):
        found = _walk_up(start)
        if found is not None:
            return found
    return None


def cache_dir() -> Path:
    """The folder where privcal caches data sets it builds (not created here).

    ``$PRIVCAL_CACHE_DIR`` when set and non-empty, else ``platformdirs.user_cache_dir("privcal")``
    (e.g. ``~/.cache/privcal`` on Linux).
    """
    env = os.environ.get(CACHE_ENV, "")
    if env:
        return Path(env).expanduser().resolve()
    return Path(platformdirs.user_cache_dir("privcal"))
