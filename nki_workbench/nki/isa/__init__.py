"""``nki.isa`` (``nisa``): direct access to NeuronCore instructions."""
