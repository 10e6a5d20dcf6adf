"""Tests of kcheck.kernels (a package so that its conftest and modules do not shadow the top-level tests')."""
