"""GRPO's rewards, grouped by kind as TRL groups its own: answers checked (``accuracy_rewards``), shape checked
(``format_rewards``) and the rest (``other_rewards``), read through ``reading``, built from specs by ``registry`` and
tried by hand on ``bench``."""
