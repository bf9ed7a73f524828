"""After training: a checkpoint merged into a Hugging Face model, and two models compared on a test set.

- :mod:`~grpokit.evaluation.model_merge`: ``grpokit merge`` (verl's model merger on a chosen checkpoint).
- :mod:`~grpokit.evaluation.compare`: ``grpokit serve-eval``'s questions, scoring and results
  (the servers come from :mod:`grpokit.serving.vllm`).
"""
