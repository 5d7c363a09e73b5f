#!/usr/bin/env bash
# Builds build/gemv_chain (dev/build_probe.sh). Carry build/gemv_chain to the device.
exec bash "$(dirname "$0")/../build_probe.sh" gemv_chain
