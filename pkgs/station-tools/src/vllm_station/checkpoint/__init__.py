"""The checkpoint contract, in one home: the verify stamp, the hash record, the safetensors header
reader and the verification core that `station verify`, `station download`, `station gate` and the
preflight checks share. No CLI, no HTTP.

- `stamp`: `.station-verified.json` (`STAMP_NAME`, `Stamp`, `read_stamp`, `write_stamp`, `remove_stamp`)
- `hashes`: `.station-hashes.json` (`HashRecord`, `read_hash_record`, `write_hash_record`, `hash_file`)
- `safetensors`: `read_shard_header`
- `layout`: the checkpoint's file names and its KV-cache quantization (`read_kv_cache_quant`)
- `verification`: `verify_checkpoint` and its report
"""

from vllm_station.checkpoint.hashes import HASHES_NAME
from vllm_station.checkpoint.stamp import STAMP_NAME, Stamp, StampError, StampMissing, read_stamp

__all__ = ["HASHES_NAME", "STAMP_NAME", "Stamp", "StampError", "StampMissing", "read_stamp"]
