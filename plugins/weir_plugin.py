"""Registers Weir with Airflow (`airflow plugins` lists it). The operators, hooks and triggers live
in the `weir_airflow` package beside this file; Airflow puts the plugins folder on `sys.path`, so
DAG files and the triggerer import them as `weir_airflow.*`."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class WeirPlugin(AirflowPlugin):
    name = "weir"
