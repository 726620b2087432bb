"""The control plane's driver-side and operator-side pieces: the lease that keeps one driver per
pipeline, the heartbeat and progress a driver publishes, the event log of lifecycle actions, the
status read from all of them, and the launch and supervision of detached drivers.

Nothing here imports pyspark at module level: Airflow tasks, triggers and the `weir` CLI use these
modules without a JVM.
"""
