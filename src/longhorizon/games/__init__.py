"""Strategic interaction: preference games (Nash-MP, INPO), equilibria of Markov games (CCE),
bounded-rationality curricula (QARL) and one-sided-information differential games (CAMS)."""
