// Checkpoint files on a real file system: safetensors round trip, the layout a safetensors reader
// expects, corruption and torn writes found, pruning, and a full disk (a small tmpfs, when root).
#include "sceptre/train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sceptre/train/replica_core.h"
#include "train/buffers.h"

namespace sceptre::train {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/sceptre-ckpt-XXXXXX";
    path = ::mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string bytes_of(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

std::vector<TensorBytes> sample_tensors() {
  std::int64_t seven = 7;
  return {{"model.w", "F32", {2, 3}, bytes_of({1, 2, 3, 4, 5, 6})},
          {"model.b", "F32", {3}, bytes_of({-1, 0.5f, 2})},
          {"adam.step.w", "I64", {}, std::string(reinterpret_cast<const char*>(&seven), 8)}};
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// A complete checkpoint of `step` under root, with two shards.
FoundCheckpoint make_checkpoint(const std::string& root, std::uint64_t step) {
  std::string dir = root + "/" + checkpoint_name(step);
  fs::create_directories(dir);
  auto t = sample_tensors();
  Manifest m{step, R"({"hidden":4})", {step * 10, {3, 5}}, {}};
  m.shards.push_back(write_shard(dir, shard_name(0, 2), {t[0]}).value());
  m.shards.push_back(write_shard(dir, shard_name(1, 2), {t[1], t[2]}).value());
  write_manifest(dir, m).check();
  return {dir, m};
}

TEST(Checkpoint, AShardRoundTripsAndIsSafetensors) {
  TempDir tmp;
  auto t = sample_tensors();
  auto f = write_shard(tmp.path, "a.safetensors", t, {{"step", "12"}});
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(f->tensors, 3u);
  EXPECT_FALSE(fs::exists(tmp.path + "/a.safetensors.tmp"));
  std::string b = slurp(tmp.path + "/a.safetensors");
  ASSERT_EQ(b.size(), f->bytes);

  // The safetensors layout: u64 little-endian header length, a JSON header, then the data,
  // each tensor's data_offsets relative to the data's start.
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(b[i])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u) << "the data is not 8-byte aligned";
  auto header = nlohmann::json::parse(b.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["step"], "12");
  EXPECT_EQ(header["model.w"]["dtype"], "F32");
  EXPECT_EQ(header["model.w"]["shape"], nlohmann::json::array({2, 3}));
  auto offs = header["model.b"]["data_offsets"].get<std::vector<std::uint64_t>>();
  float b0;
  std::memcpy(&b0, b.data() + 8 + n + offs[0], 4);
  EXPECT_EQ(b0, -1.0f);
  EXPECT_EQ(header["adam.step.w"]["shape"], nlohmann::json::array());

  auto back = read_shard(tmp.path, *f);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  ASSERT_EQ(back->size(), t.size());
  for (std::size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ((*back)[i].name, t[i].name);
    EXPECT_EQ((*back)[i].dtype, t[i].dtype);
    EXPECT_EQ((*back)[i].shape, t[i].shape);
    EXPECT_EQ((*back)[i].data, t[i].data);
  }
}

TEST(Checkpoint, BadTensorsAreRefusedBeforeAnythingIsWritten) {
  TempDir tmp;
  auto t = sample_tensors();
  t[0].shape = {4, 4};
  auto f = write_shard(tmp.path, "a.safetensors", t);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), Code::kInvalidArgument);
  EXPECT_TRUE(fs::is_empty(tmp.path));
}

TEST(Checkpoint, CorruptionIsFoundByTheChecksumAndTheHeaderChecks) {
  TempDir tmp;
  auto f = write_shard(tmp.path, "a.safetensors", sample_tensors()).value();
  std::string good = slurp(tmp.path + "/a.safetensors");

  std::string flipped = good;
  flipped[flipped.size() - 3] ^= 0x10;
  spit(tmp.path + "/a.safetensors", flipped);
  auto r = read_shard(tmp.path, f);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Code::kDataLoss);
  EXPECT_NE(r.error().message().find("checksum"), std::string::npos) << r.error().message();

  spit(tmp.path + "/a.safetensors", good.substr(0, good.size() - 1));
  r = read_shard(tmp.path, f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("bytes"), std::string::npos) << r.error().message();

  // A header that lies, under a checksum that matches it (a writer's bug, not a disk's).
  std::string lying = good;
  auto at = lying.find("\"data_offsets\":[0,24]");
  ASSERT_NE(at, std::string::npos);
  lying.replace(at, 21, "\"data_offsets\":[0,20]");
  spit(tmp.path + "/a.safetensors", lying);
  ShardFile g = f;
  g.xxh3 = XXH3_64bits(lying.data(), lying.size());
  r = read_shard(tmp.path, g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("offsets"), std::string::npos) << r.error().message();

  auto again = write_shard(tmp.path, "b.safetensors", sample_tensors()).value();
  EXPECT_EQ(again.xxh3, f.xxh3) << "the same tensors must give the same bytes";
  EXPECT_FALSE(read_shard(tmp.path, ShardFile{"missing.safetensors", 10, 0, 1}).ok());
}

TEST(Checkpoint, FindSkipsTornAndIncompleteCheckpointsNewestFirst) {
  TempDir tmp;
  make_checkpoint(tmp.path, 10);
  make_checkpoint(tmp.path, 20);
  auto c30 = make_checkpoint(tmp.path, 30);
  // 40: a write that stopped before its manifest; 50: a torn manifest; 60: a shard gone.
  fs::create_directories(tmp.path + "/" + checkpoint_name(40));
  spit(tmp.path + "/" + checkpoint_name(40) + "/" + shard_name(0, 2) + ".tmp", "partial");
  auto c50 = make_checkpoint(tmp.path, 50);
  std::string m = slurp(c50.dir + "/manifest.json");
  spit(c50.dir + "/manifest.json", m.substr(0, m.size() / 2));
  auto c60 = make_checkpoint(tmp.path, 60);
  fs::remove(c60.dir + "/" + shard_name(1, 2));
  fs::create_directories(tmp.path + "/not-a-checkpoint");

  std::vector<std::string> skipped;
  auto found = find_checkpoints(tmp.path, &skipped);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].manifest.step, 30u);
  EXPECT_EQ(found[1].manifest.step, 20u);
  EXPECT_EQ(found[2].manifest.step, 10u);
  EXPECT_EQ(found[0].manifest.data.cursor, 300u);
  EXPECT_EQ(found[0].manifest.data.returned, (std::vector<std::uint64_t>{3, 5}));
  EXPECT_EQ(found[0].manifest.model, R"({"hidden":4})");
  ASSERT_EQ(skipped.size(), 3u);
  EXPECT_NE(skipped[0].find("missing"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[1].find("JSON"), std::string::npos) << skipped[1];
  EXPECT_NE(skipped[2].find("no manifest"), std::string::npos) << skipped[2];

  auto all = load_checkpoint(found[0]);
  ASSERT_TRUE(all.ok()) << all.error().to_string();
  EXPECT_EQ(all->size(), 3u);

  // A corrupt shard with the right size is found only by reading it.
  std::string shard = c30.dir + "/" + shard_name(0, 2);
  std::string b = slurp(shard);
  b[b.size() - 1] ^= 1;
  spit(shard, b);
  EXPECT_EQ(find_checkpoints(tmp.path, nullptr).front().manifest.step, 30u);
  auto bad = load_checkpoint(find_checkpoints(tmp.path, nullptr).front());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("checksum"), std::string::npos);
}

TEST(Checkpoint, PruneKeepsTheNewestAndWhatIsBeingWritten) {
  TempDir tmp;
  for (std::uint64_t s : {10, 20, 30, 40}) make_checkpoint(tmp.path, s);
  fs::create_directories(tmp.path + "/" + checkpoint_name(15));  // torn, older than the newest
  fs::create_directories(tmp.path + "/" + checkpoint_name(50));  // being written
  auto removed = prune_checkpoints(tmp.path, 2);
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_FALSE(fs::exists(tmp.path + "/" + checkpoint_name(10)));
  EXPECT_FALSE(fs::exists(tmp.path + "/" + checkpoint_name(15)));
  EXPECT_FALSE(fs::exists(tmp.path + "/" + checkpoint_name(20)));
  EXPECT_TRUE(fs::exists(tmp.path + "/" + checkpoint_name(30)));
  EXPECT_TRUE(fs::exists(tmp.path + "/" + checkpoint_name(40)));
  EXPECT_TRUE(fs::exists(tmp.path + "/" + checkpoint_name(50)));
}

TEST(Checkpoint, ShardsAreBalancedAndTheSameEverywhere) {
  std::vector<std::uint64_t> sizes{100, 10, 60, 50, 5, 40};
  auto a = assign_shards(sizes, 3);
  EXPECT_EQ(a, assign_shards(sizes, 3));
  std::vector<std::uint64_t> load(3, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i) load[a[i]] += sizes[i];
  EXPECT_EQ(*std::max_element(load.begin(), load.end()), 100u);
  EXPECT_EQ(assign_shards(sizes, 1), std::vector<std::size_t>(sizes.size(), 0));
}

TEST(Checkpoint, AFullDiskFailsTheWriteAndLeavesTheOldCheckpointWhole) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  TempDir tmp;
  ASSERT_EQ(::mount("tmpfs", tmp.path.c_str(), "tmpfs", 0, "size=64k"), 0) << std::strerror(errno);
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{tmp.path};
  auto old = make_checkpoint(tmp.path, 10);
  std::string dir = tmp.path + "/" + checkpoint_name(20);
  fs::create_directories(dir);
  TensorBytes big{"model.w", "F32", {64 * 1024}, std::string(256 * 1024, '\1')};
  auto f = write_shard(dir, shard_name(0, 1), {big});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), Code::kResourceExhausted) << f.error().to_string();
  EXPECT_NE(f.error().message().find("No space"), std::string::npos) << f.error().message();
  EXPECT_TRUE(fs::is_empty(dir)) << "the failed write left its temporary behind";
  auto found = find_checkpoints(tmp.path, nullptr);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(load_checkpoint(found[0]).ok());
}

// A captured tensor's copy (in huge pages where it is large and the machine allows them) holds
// exactly its bytes, whatever its size and wherever its allocation falls.
TEST(Checkpoint, ACaptureCopyHoldsExactlyItsBytes) {
  std::string source(9u * 1024 * 1024 + 123, '\0');
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<char>((i * 2654435761u) >> 13);
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4u << 20} - 1, std::size_t{4u << 20},
                           source.size() - 7}) {
    for (std::size_t at : {std::size_t{0}, std::size_t{7}}) {
      std::string copy = io_copy(source.data() + at, size);
      ASSERT_EQ(copy.size(), size);
      EXPECT_EQ(std::memcmp(copy.data(), source.data() + at, size), 0) << size << " bytes from " << at;
    }
  }
}

TEST(ReplicaCore, TensorsRoundTripThroughShardsAndRefuseAnotherModel) {
  ModelSpec spec;
  spec.hidden = 32;
  ReplicaCore a(spec), b(spec);
  for (std::uint64_t step = 0; step < 3; ++step) a.apply(a.local_gradients(step * 16, 16, nullptr), 1);
  std::vector<TensorBytes> all;
  for (std::size_t k = 0; k < 3; ++k)
    for (auto& t : a.tensors(k, 3)) all.push_back(t);
  EXPECT_EQ(all.size(), a.tensors().size());
  b.load_tensors(all, a.step());
  EXPECT_EQ(a.digest(), b.digest());
  a.apply(a.local_gradients(48, 16, nullptr), 1);
  b.apply(b.local_gradients(48, 16, nullptr), 1);
  EXPECT_EQ(a.digest(), b.digest()) << "the optimizer state did not come along";

  ModelSpec other = spec;
  other.hidden = 16;
  ReplicaCore c(other);
  auto before = c.digest();
  EXPECT_THROW(c.load_tensors(all, 3), std::runtime_error);
  all.pop_back();
  EXPECT_THROW(b.load_tensors(all, 3), std::runtime_error);
  EXPECT_EQ(c.digest(), before);
}

}  // namespace
}  // namespace sceptre::train
