"""Finite MDPs as arrays and the effective-horizon analysis (Laidlaw, Russell, Dragan, 2023/2024).

* :mod:`.mdp` - the :class:`~.mdp.TabularMDP` type, BRIDGE ``.npz`` I/O, sticky-action variants;
* :mod:`.dp` - exact horizon-indexed dynamic programming (random, optimal, worst, ``Q^k``);
* :mod:`.horizon` - min k, the effective planning window, the simple bound, the full report;
* :mod:`.gorp_bounds` - the tight (Appendix C) bound: GORP's failure probability, bisected over ``m``;
* :mod:`.choice_bounds` - bounds on GORP's choice probabilities and the worst case over them;
* :mod:`.gorp` - GORP itself and its empirical sample complexity;
* :mod:`.tabularize` - enumerate MiniGrid and gymnax environments into tabular MDPs;
* :mod:`.cli` - ``longhorizon horizon``.
"""
