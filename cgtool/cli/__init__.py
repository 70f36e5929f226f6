"""Thin typer commands: parse, call one domain function, pick a renderer, map errors to exit codes."""
