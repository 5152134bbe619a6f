"""Reef's own test doubles: stand-ins of the services Reef talks to that cannot run here
(Tinker, vLLM, SGLang, slime's training loop) and scripted task generators. The tests and
benchmarks of this workspace import them as ``doubles.<module>``; they are not part of any
distribution (a recipe author's helpers are :mod:`reef.testing`)."""
