"""The composition layer: the only place that imports several services.

The command line, the train pipeline, the launchers, evaluation, benchmarks and the
builders of the synthetic world and the tiny model live here; the base (`areal_mem.*`
outside `app`) and the services (`rollout`, `learner`, `retriever`) never import it.
See docs/architecture.md.
"""
