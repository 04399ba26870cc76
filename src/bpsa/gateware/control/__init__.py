"""The instruction-driven controller: fetch, dispatcher, load unit, step scheduler, result
addressing, counters.
"""
