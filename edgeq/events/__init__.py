"""Queue events: the sink that records them, the dispatcher that delivers them to rules, and rule bindings."""
