"""Replaying runs with a change, as an evaluation: replays fork a recorded run at a seq with overrides
(a model, a prompt, a backend, a tool's canned answers), never call the real side effects, and are
compared with their originals; a saved set of runs is run again on demand."""
