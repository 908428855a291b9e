"""Adapters that run rpgrl's losses inside other engines. Each is an optional extra and imports its engine:

    rpgrl.integrations.verl   `pip install rpgrl[verl]`: every RPG variant as a verl policy-loss mode
                              (`rpg_<divergence>_<style>`) and the `rpg` advantage estimator; verl loads it by
                              itself through the `verl.plugins` entry point.
    rpgrl.integrations.trl    `pip install rpgrl[trl]`: `RPGConfig` / `RPGTrainer` on top of TRL's GRPOTrainer.

Adapters only translate names, shapes and normalisers; the math lives in `rpgrl.objectives` and
`rpgrl.advantages`, which with `rpgrl.options` (the loss options' names and checks) are the only parts of rpgrl
they import. Nothing in rpgrl imports this package.
"""
