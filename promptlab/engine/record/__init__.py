"""Recording what a run's items leave behind, durably, through the engine's one writer."""
