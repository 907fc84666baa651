// Checkpoints for the loss of a whole job: safetensors shards with a JSON manifest written last.
// No libtorch here: tensors are named bytes, and ReplicaCore turns its state into them and back.
//
//   ROOT/step-000000001200/shard-00001-of-00004.safetensors   one per writer, written to a
//   ROOT/step-000000001200/manifest.json                      ".tmp" name, fsynced, renamed
//
// A checkpoint is complete when its manifest is there: the manifest is written only after every
// shard has been renamed into place and the directory fsynced, and it is itself written to a
// temporary name, fsynced and renamed. It lists every shard with its size and XXH3-64 checksum
// (libxxhash), so a torn or corrupt checkpoint is found before it is loaded. Nothing is ever
// overwritten: a write that fails (a full disk, an I/O error) removes only its own files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sceptre/core/result.h"
#include "sceptre/wire/archive.h"

namespace sceptre::train {

// One tensor as bytes: dtype "F32" or "I64" (safetensors names), row-major.
struct TensorBytes {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string data;
  SCEPTRE_FIELDS(name, dtype, shape, data)
};

// One written shard, as the manifest lists it.
struct ShardFile {
  std::string file;        // relative to the checkpoint's directory
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;  // XXH3-64 of the whole file
  std::uint64_t tensors = 0;
  SCEPTRE_FIELDS(file, bytes, xxh3, tensors)
};

// Where the controller's sample plan stood: the next fresh sample, and blocks given back by
// discarded steps that are served before it.
struct DataPosition {
  std::uint64_t cursor = 0;
  std::vector<std::uint64_t> returned;
  SCEPTRE_FIELDS(cursor, returned)
};

struct Manifest {
  std::uint64_t step = 0;       // committed steps the state holds
  std::string model;            // the ModelSpec and batch it was trained with, as JSON
  DataPosition data;
  std::vector<ShardFile> shards;
  SCEPTRE_FIELDS(step, model, data, shards)
};

// "step-000000001200".
std::string checkpoint_name(std::uint64_t step);

// Which of `shards` writers writes tensor i: balanced by bytes, the same in every replica.
std::vector<std::size_t> assign_shards(const std::vector<std::uint64_t>& tensor_bytes, std::size_t shards);

// "shard-00001-of-00004.safetensors".
std::string shard_name(std::size_t shard, std::size_t shards);

// Writes `tensors` as one safetensors file `dir/file` (through "file.tmp", fsync, rename, fsync
// of dir). `metadata` goes in the header's "__metadata__". On error nothing is left behind.
Result<ShardFile> write_shard(const std::string& dir, const std::string& file, const std::vector<TensorBytes>& tensors,
                             const std::vector<std::pair<std::string, std::string>>& metadata = {});

// Reads and checks a shard: its size and checksum against `expect`, then the header (dtypes,
// shapes, offsets that tile the data exactly).
Result<std::vector<TensorBytes>> read_shard(const std::string& dir, const ShardFile& expect);

// Writes dir/manifest.json the same way; the checkpoint is complete once this returns.
Result<void> write_manifest(const std::string& dir, const Manifest& manifest);
Result<Manifest> read_manifest(const std::string& dir);

// The complete checkpoints under root, newest first: directories whose manifest parses and
// whose shards are there with their listed sizes. Each one passed over goes to `skipped` with
// the reason (a torn write, a missing shard).
struct FoundCheckpoint {
  std::string dir;
  Manifest manifest;
};
std::vector<FoundCheckpoint> find_checkpoints(const std::string& root, std::vector<std::string>* skipped);

// Reads every shard of a checkpoint, checking sizes and checksums; returns all its tensors.
Result<std::vector<TensorBytes>> load_checkpoint(const FoundCheckpoint& found);

// Keeps the newest `keep` complete checkpoints; removes older complete ones and incomplete
// directories older than the newest complete one (a checkpoint still being written is newer).
// Returns the directories removed.
std::vector<std::string> prune_checkpoints(const std::string& root, std::size_t keep);

// Removes a checkpoint directory and what is in it (an abandoned write).
void remove_checkpoint(const std::string& dir);

}  // namespace sceptre::train
