"""Imported last by the batch's forkserver (``batch.WORKER_PRELOAD``): every object its
imports made is moved to the collector's permanent generation (``gc.freeze``), so a
forked worker's collections never write to those objects' headers -- pages the forkserver
and every worker would otherwise each copy (copy-on-write) and hold privately.

Nothing else imports this module: freezing is for a process that only forks.
"""
import gc

gc.collect()   # the imports' own garbage is not kept for ever
gc.freeze()
