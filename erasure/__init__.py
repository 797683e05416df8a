"""Erasure of a data subject: request → service → registry → erasers → receipt.

models.py       the request (and its receipt)
services.py     create, execute, retry a request
registry.py     the erasers settings.ERASERS names, their places and declared-free columns
erasers/        one eraser per part of Keeper that keeps a subject's data
matching.py     the rules that find a subject's id and texts, in SQL and in Python (redactor.py)
places.py       a place, and the generic column place the scan counts
scan.py         what a request covers, and the scan that counts every place for it
receipt.py      the receipt, and what a request that did not finish says
selectors.py    reads; api.py and urls.py: /api/v1/erasure-requests/
"""
