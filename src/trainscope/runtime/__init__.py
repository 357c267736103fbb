"""Runtime: the device and seeds of a run, the process group, threads, signals and the
watchdog. Importing the package imports nothing: ``runtime.signals`` and
``runtime.threads`` stay torch-free for the command line."""
