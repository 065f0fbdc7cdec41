"""What a backend imports to start and steer emoji sets, and the ``popcon`` command line on top of it."""
