"""The research loop's agents: researcher, critic and correlator, each recording one flow per run."""
