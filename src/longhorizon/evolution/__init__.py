"""How learning scales: discovered lifetime-aware objectives (TA-LPO), evolution strategies for LM
policies, and simple rewards for PPO at large minibatches (CaRL)."""
