"""The scenario files that ship with vimpc, installed as ``vimpc_scenarios``.

This folder holds data, not code: the ``*.toml`` files are package data, so a regular
(non-editable) install carries them and ``vimpc run NAME`` finds them from any folder
(:mod:`vimpc.scenario.catalog`).
"""
