"""The Neuron compile cache: the key a trial's compile is stored under, and the registry's entries and markers."""
