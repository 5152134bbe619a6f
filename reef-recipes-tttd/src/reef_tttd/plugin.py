"""The ``tttd`` plugin (entry point ``reef.plugins``).

It contributes no class yet: ``TTTDSamples`` and its step-grid job data come with the recipes
issue. The entry point exists so that blocking ``tttd`` and listing plugins already work.
"""
