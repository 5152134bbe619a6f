"""Values and rules shared by every layer of Reef: records, trajectories, settings, plugins."""
