"""Devices, the cluster and the strategy; coordination of several workers."""
