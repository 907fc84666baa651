// Checkpoint files: safetensors shards, the manifest, finding, loading and pruning.
#include "sceptre/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace sceptre::train {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

constexpr const char* kFormat = "sceptre-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kManifest = "manifest.json";

Error os_error(const std::string& what, const std::string& path, int err) {
  Code code = err == ENOSPC || err == EDQUOT ? Code::kResourceExhausted : err == ENOENT ? Code::kNotFound : Code::kDataLoss;
  return Error(code, what + " " + path + ": " + std::strerror(err));
}

std::size_t dtype_size(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "I64") return 8;
  return 0;
}

// A file written through a temporary name: write, fsync, rename, fsync the directory. The
// temporary is removed on any failure, so a failed write leaves nothing.
class AtomicFile {
 public:
  AtomicFile(std::string dir, std::string name)
      : dir_(std::move(dir)), path_(dir_ + "/" + name), tmp_(path_ + ".tmp"), state_(XXH3_createState()) {
    XXH3_64bits_reset(state_);
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!done_) ::unlink(tmp_.c_str());
    XXH3_freeState(state_);
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  Result<void> open() {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return os_error("create", tmp_, errno);
    return {};
  }
  // In pieces of 1 MiB, each hashed just before it is written (still in cache for the copy into
  // the page cache). One write() of a whole shard was slower and more variable here than 1 MiB
  // writes, as fio does them.
  Result<void> write(const void* data, std::size_t n) {
    constexpr std::size_t kPiece = 1u << 20;
    const char* p = static_cast<const char*>(data);
    for (std::size_t at = 0; at < n;) {
      std::size_t piece = std::min(n - at, kPiece);
      XXH3_64bits_update(state_, p + at, piece);
      for (std::size_t end = at + piece; at < end;) {
        ssize_t w = ::write(fd_, p + at, end - at);
        if (w < 0) {
          if (errno == EINTR) continue;
          return os_error("write", tmp_, errno);
        }
        at += static_cast<std::size_t>(w);
        bytes_ += static_cast<std::uint64_t>(w);
      }
    }
    return {};
  }
  // fsync, close, rename into place, fsync the directory.
  Result<void> commit() {
    if (::fsync(fd_) != 0) return os_error("fsync", tmp_, errno);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return os_error("close", tmp_, errno);
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) return os_error("rename", tmp_, errno);
    done_ = true;
    int d = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) return os_error("open", dir_, errno);
    int rc = ::fsync(d);
    int err = errno;
    ::close(d);
    if (rc != 0) return os_error("fsync", dir_, err);
    return {};
  }
  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t checksum() const { return XXH3_64bits_digest(state_); }

 private:
  std::string dir_, path_, tmp_;
  XXH3_state_t* state_;
  int fd_ = -1;
  bool done_ = false;
  std::uint64_t bytes_ = 0;
};

Result<std::string> read_file(const std::string& path, std::uint64_t limit) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return os_error("open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return os_error("stat", path, err);
  }
  if (static_cast<std::uint64_t>(st.st_size) > limit) {
    ::close(fd);
    return Error(Code::kDataLoss, path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                                      std::to_string(limit) + " expected");
  }
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t at = 0;
  while (at < out.size()) {
    ssize_t r = ::read(fd, out.data() + at, out.size() - at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int err = r < 0 ? errno : EIO;
      ::close(fd);
      return os_error("read", path, err);
    }
    at += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return out;
}

std::string hex(std::uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

bool parse_step(const std::string& name, std::uint64_t* step) {
  if (name.size() != 17 || name.rfind("step-", 0) != 0) return false;
  std::uint64_t v = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  *step = v;
  return true;
}

// Step directories under root, newest first.
std::vector<std::pair<std::uint64_t, std::string>> step_dirs(const std::string& root) {
  std::vector<std::pair<std::uint64_t, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::uint64_t step;
    if (it->is_directory(ec) && parse_step(it->path().filename().string(), &step)) {
      out.emplace_back(step, it->path().string());
    }
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.first > b.first; });
  return out;
}

}  // namespace

std::string checkpoint_name(std::uint64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%012llu", static_cast<unsigned long long>(step));
  return b;
}

std::string shard_name(std::size_t shard, std::size_t shards) {
  char b[64];
  std::snprintf(b, sizeof b, "shard-%05zu-of-%05zu.safetensors", shard, shards);
  return b;
}

std::vector<std::size_t> assign_shards(const std::vector<std::uint64_t>& tensor_bytes, std::size_t shards) {
  shards = std::max<std::size_t>(1, shards);
  std::vector<std::size_t> order(tensor_bytes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return tensor_bytes[a] > tensor_bytes[b]; });
  std::vector<std::uint64_t> load(shards, 0);
  std::vector<std::size_t> out(tensor_bytes.size(), 0);
  for (auto i : order) {  // largest first, each to the lightest shard so far (lowest index on ties)
    auto k = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[i] = k;
    load[k] += tensor_bytes[i];
  }
  return out;
}

Result<ShardFile> write_shard(const std::string& dir, const std::string& file, const std::vector<TensorBytes>& tensors,
                             const std::vector<std::pair<std::string, std::string>>& metadata) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    auto& meta = header["__metadata__"] = ordered_json::object();
    for (auto& [k, v] : metadata) meta[k] = v;
  }
  std::uint64_t at = 0;
  for (auto& t : tensors) {
    std::uint64_t elements = 1;
    for (auto d : t.shape) elements *= static_cast<std::uint64_t>(d);
    if (dtype_size(t.dtype) == 0 || elements * dtype_size(t.dtype) != t.data.size()) {
      return Error(Code::kInvalidArgument, "tensor " + t.name + ": " + std::to_string(t.data.size()) +
                                               " bytes do not match dtype " + t.dtype + " and its shape");
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.data.size()}}};
    at += t.data.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::uint64_t n = h.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));  // little-endian

  AtomicFile out(dir, file);
  if (auto r = out.open(); !r) return r.error();
  if (auto r = out.write(len, 8); !r) return r.error();
  if (auto r = out.write(h.data(), h.size()); !r) return r.error();
  for (auto& t : tensors)
    if (auto r = out.write(t.data.data(), t.data.size()); !r) return r.error();
  if (auto r = out.commit(); !r) return r.error();
  return ShardFile{file, out.bytes(), out.checksum(), tensors.size()};
}

Result<std::vector<TensorBytes>> read_shard(const std::string& dir, const ShardFile& expect) {
  std::string path = dir + "/" + expect.file;
  auto bytes = read_file(path, expect.bytes);
  if (!bytes) return bytes.error();
  const std::string& b = *bytes;
  auto bad = [&](const std::string& why) { return Error(Code::kDataLoss, path + ": " + why); };
  if (b.size() != expect.bytes) {
    return bad(std::to_string(b.size()) + " bytes, the manifest says " + std::to_string(expect.bytes));
  }
  if (auto sum = XXH3_64bits(b.data(), b.size()); sum != expect.xxh3) {
    return bad("checksum " + hex(sum) + ", the manifest says " + hex(expect.xxh3) + " (corrupt)");
  }
  if (b.size() < 8) return bad("shorter than a safetensors header");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(b[i])) << (8 * i);
  if (n > b.size() - 8) return bad("header of " + std::to_string(n) + " bytes runs past the end");
  ordered_json header = ordered_json::parse(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n), nullptr, false);
  if (header.is_discarded() || !header.is_object()) return bad("the header is not a JSON object");
  const std::uint64_t data_at = 8 + n, data_size = b.size() - data_at;
  std::vector<TensorBytes> out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      TensorBytes t;
      t.name = name;
      t.dtype = v.at("dtype").get<std::string>();
      t.shape = v.at("shape").get<std::vector<std::int64_t>>();
      auto offs = v.at("data_offsets").get<std::vector<std::uint64_t>>();
      std::uint64_t elements = 1;
      for (auto d : t.shape) {
        if (d < 0) return bad("tensor " + name + " has a negative dimension");
        elements *= static_cast<std::uint64_t>(d);
      }
      if (dtype_size(t.dtype) == 0) return bad("tensor " + name + " has dtype " + t.dtype + " (F32 and I64 are read)");
      if (offs.size() != 2 || offs[0] > offs[1] || offs[1] > data_size ||
          offs[1] - offs[0] != elements * dtype_size(t.dtype)) {
        return bad("tensor " + name + " has offsets that do not fit its shape or the file");
      }
      t.data = b.substr(data_at + offs[0], offs[1] - offs[0]);
      spans.emplace_back(offs[0], offs[1]);
      out.push_back(std::move(t));
    } catch (const nlohmann::json::exception& e) {
      return bad("tensor " + name + ": " + e.what());
    }
  }
  std::sort(spans.begin(), spans.end());
  std::uint64_t at = 0;
  for (auto& [begin, end] : spans) {
    if (begin != at) return bad("tensor data overlaps or leaves a gap");
    at = end;
  }
  if (at != data_size) return bad("bytes after the last tensor");
  return out;
}

Result<void> write_manifest(const std::string& dir, const Manifest& m) {
  ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["step"] = m.step;
  j["model"] = ordered_json::parse(m.model.empty() ? "{}" : m.model, nullptr, false);
  j["data"] = {{"cursor", m.data.cursor}, {"returned", m.data.returned}};
  auto& shards = j["shards"] = ordered_json::array();
  for (auto& s : m.shards) {
    shards.push_back({{"file", s.file}, {"bytes", s.bytes}, {"xxh3", hex(s.xxh3)}, {"tensors", s.tensors}});
  }
  std::string text = j.dump(2) + "\n";
  AtomicFile out(dir, kManifest);
  if (auto r = out.open(); !r) return r;
  if (auto r = out.write(text.data(), text.size()); !r) return r;
  return out.commit();
}

Result<Manifest> read_manifest(const std::string& dir) {
  std::string path = dir + "/" + kManifest;
  auto text = read_file(path, 64u << 20);
  if (!text) return text.error();
  auto j = ordered_json::parse(*text, nullptr, false);
  auto bad = [&](const std::string& why) { return Error(Code::kDataLoss, path + ": " + why); };
  if (j.is_discarded() || !j.is_object()) return bad("not JSON (a torn write?)");
  try {
    if (j.at("format") != kFormat) return bad("not a sceptre checkpoint manifest");
    if (j.at("version") != kVersion) return bad("version " + j.at("version").dump() + ", expected 1");
    Manifest m;
    m.step = j.at("step").get<std::uint64_t>();
    m.model = j.at("model").dump();
    m.data.cursor = j.at("data").at("cursor").get<std::uint64_t>();
    m.data.returned = j.at("data").at("returned").get<std::vector<std::uint64_t>>();
    for (auto& s : j.at("shards")) {
      ShardFile f;
      f.file = s.at("file").get<std::string>();
      if (f.file.empty() || f.file.find('/') != std::string::npos || f.file[0] == '.') {
        return bad("shard file name '" + f.file + "' is not a plain name");
      }
      f.bytes = s.at("bytes").get<std::uint64_t>();
      auto x = s.at("xxh3").get<std::string>();
      if (x.size() != 16 || x.find_first_not_of("0123456789abcdef") != std::string::npos) return bad("bad xxh3 " + x);
      f.xxh3 = std::stoull(x, nullptr, 16);
      f.tensors = s.at("tensors").get<std::uint64_t>();
      m.shards.push_back(std::move(f));
    }
    if (m.shards.empty()) return bad("no shards");
    return m;
  } catch (const std::exception& e) {
    return bad(e.what());
  }
}

std::vector<FoundCheckpoint> find_checkpoints(const std::string& root, std::vector<std::string>* skipped) {
  std::vector<FoundCheckpoint> out;
  auto skip = [&](const std::string& dir, const std::string& why) {
    if (skipped) skipped->push_back(dir + ": " + why);
  };
  for (auto& [step, dir] : step_dirs(root)) {
    auto m = read_manifest(dir);
    if (!m) {
      skip(dir, m.error().code() == Code::kNotFound ? "no manifest (an unfinished write)" : m.error().message());
      continue;
    }
    if (m->step != step) {
      skip(dir, "the manifest is of step " + std::to_string(m->step));
      continue;
    }
    std::string missing;
    for (auto& s : m->shards) {
      std::error_code ec;
      auto size = fs::file_size(dir + "/" + s.file, ec);
      if (ec) {
        missing = s.file + " is missing";
      } else if (size != s.bytes) {
        missing = s.file + " has " + std::to_string(size) + " bytes, the manifest says " + std::to_string(s.bytes);
      }
      if (!missing.empty()) break;
    }
    if (!missing.empty()) {
      skip(dir, missing);
      continue;
    }
    out.push_back(FoundCheckpoint{dir, std::move(*m)});
  }
  return out;
}

Result<std::vector<TensorBytes>> load_checkpoint(const FoundCheckpoint& found) {
  std::vector<TensorBytes> all;
  for (auto& s : found.manifest.shards) {
    auto part = read_shard(found.dir, s);
    if (!part) return part.error();
    if (part->size() != s.tensors) {
      return Error(Code::kDataLoss, found.dir + "/" + s.file + ": " + std::to_string(part->size()) +
                                        " tensors, the manifest says " + std::to_string(s.tensors));
    }
    for (auto& t : *part) all.push_back(std::move(t));
  }
  return all;
}

std::vector<std::string> prune_checkpoints(const std::string& root, std::size_t keep) {
  auto complete = find_checkpoints(root, nullptr);
  std::vector<std::string> removed;
  if (complete.empty()) return removed;
  std::uint64_t newest = complete.front().manifest.step;
  std::vector<std::string> keep_dirs;
  for (std::size_t i = 0; i < complete.size() && i < std::max<std::size_t>(1, keep); ++i) keep_dirs.push_back(complete[i].dir);
  for (auto& [step, dir] : step_dirs(root)) {
    if (step > newest) continue;  // being written
    if (std::find(keep_dirs.begin(), keep_dirs.end(), dir) != keep_dirs.end()) continue;
    remove_checkpoint(dir);
    removed.push_back(dir);
  }
  return removed;
}

void remove_checkpoint(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace sceptre::train
