"""The dashboard's tools: a SYNTHETIC database built from recorded H100 measurements
(``python -m scripts.dashboard.seed``) and the page timings measured against one
(``python -m scripts.dashboard.timings``); ``scripts/screenshots.py`` photographs the pages.
"""
