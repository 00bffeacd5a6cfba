"""What promptlab tells a team's own observability stack: OpenTelemetry traces of runs."""
