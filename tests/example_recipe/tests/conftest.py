"""Only for this example's place inside the Reef workspace.

A recipe package's tests run where the package is installed (``pip install -e .``). The
workspace's own test run does not install this example; ``tests/test_example_recipe.py`` (at the
workspace root) builds its wheel, installs it in a throwaway folder and runs these tests there.
So, where ``reef_thumbs`` is not importable, the tests are left out of collection instead of
failing to import. A package of your own needs no such file.
"""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("reef_thumbs") else ["test_*.py"]
