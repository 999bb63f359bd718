"""privcal: privacy-preserving calibration and uncertainty quantification of classifiers.

Layers (imports only point down)::

    cli -> experiments -> report, federated / training / conformal / private -> calibrators
        -> metrics, plots -> privacy -> data

(``report`` turns results into documents: summaries, Markdown, HTML.)

See DESIGN.md in the repository for the architecture and the public entry points.
"""

__version__ = "0.1.0"
