"""The core's default weight recipe, ``grouped``, as one package: the recipe
(:mod:`reef.recipe.grouped.recipe`) and its two stages (:mod:`reef.recipe.grouped.processor`),
laid out as a recipe distribution lays out its own."""
