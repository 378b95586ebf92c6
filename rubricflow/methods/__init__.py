"""The built-in methods, one folder each (``rubricflow/methods/<name>/``) with one shape: ``config.py`` (its
sections), its logic modules, ``stages.py`` (thin ``@stage`` bindings), ``study.py`` (its study adapter and default
studies), ``summary.py`` (its lines of the run summary and CLI printers) and ``__init__.py`` exposing one
``METHOD`` (a ``rubricflow.registry.Method``).

``REGISTERED`` is the registration list: the kernel (``rubricflow.registry``) loads these, then any method a
package registers through the ``rubricflow.methods`` entry-point group. Order matters only for the order of
config sections, commands and summary lines. ``methods/<a>`` never imports ``methods/<b>``, except smol -> rucl
(the smol pipeline is RuCL on real weights); a pipeline names another method's stages by name instead.
"""

REGISTERED = (
    "rubricflow.methods.foundation:METHOD",
    "rubricflow.methods.rucl:METHOD",
    "rubricflow.methods.deltarubric:METHOD",
    "rubricflow.methods.roro:METHOD",
    "rubricflow.methods.smol:METHOD",
)
