"""LangGraph on Keeper: a thread is a Keeper run, each checkpoint an event (the `langgraph` extra).

Importing this package needs no LangGraph; `runs.langgraph.saver` does.
"""
