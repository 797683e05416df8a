"""LangGraph on Keeper: a thread is a Keeper run, its checkpoints its record (the `langgraph` extra).

Importing this package needs no LangGraph; `runs.langgraph.saver` does.
"""
