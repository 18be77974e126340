"""Barrier experiments across alignment methods: tables, JSON, figures."""
