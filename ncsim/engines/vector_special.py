"""Vector engine instructions beyond elementwise ALU work: statistics (bn_stats, bn_aggr), top-8
selection (max8, nc_find_index8, nc_match_replace8), dropout, partition shuffles, the 32x32
transpose and copies at a run-time offset (see ncsim/engines/__init__.py for the execute/reference
contract)."""

from __future__ import annotations
