#!/usr/bin/env bash
# Builds build/gemv_sweep (dev/build_probe.sh). Carry build/gemv_sweep to the device.
exec bash "$(dirname "$0")/../build_probe.sh" gemv_sweep
