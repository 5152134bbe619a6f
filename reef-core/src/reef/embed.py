"""Embedding Reef in a program: the installed plugins, and a deployment file read with them.

    from reef.embed import Plugins, load_deployment

    plugins = Plugins()
    plugins.load()
    deployment = load_deployment(Path("deployment.yaml"), plugins=plugins)

:class:`Plugins` loads the installed plugins (``load()``, ``resolve(kind, name)``,
``plugin(name)``); :func:`load_deployment` reads and checks a deployment file with them, raising
:class:`DeploymentError` with every problem of the file. A recipe needs none of this: what it is
written against is :mod:`reef`.
"""

from reef.core.deployment import DeploymentError
from reef.plugins.manager import Plugins
from reef.plugins.scenarios import load_deployment

__all__ = ["DeploymentError", "Plugins", "load_deployment"]
