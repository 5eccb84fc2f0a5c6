"""lakepubsub's PySpark jobs: compaction, truncation, GC and scheduled batch consumers.

Each job is a module with a ``run(ctx, options)`` function and a ``__main__``
for ``spark-submit jobs/<job>.py``; ``jobs.cli`` puts them behind
``lakepubsub jobs run <job>`` and ``lakepubsub jobs schedule``. Importing this
package imports neither PySpark nor the core engine.
"""
