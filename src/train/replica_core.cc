// The only file of the train layer that includes libtorch.
#include "sceptre/train/replica_core.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include "train/buffers.h"

namespace sceptre::train {

namespace {

// The state format: the header, "SCPT" u32 version, u64 step, u64 tensors, u64 elements of each
// tensor and an i64 Adam step count per parameter; then the float32 bytes of every tensor, in
// order: every parameter, then each parameter's Adam exp_avg and exp_avg_sq. The header first,
// so that a healer can check it and then copy the data straight into its own tensors.
constexpr char kMagic[4] = {'S', 'C', 'P', 'T'};
constexpr std::uint32_t kVersion = 2;

void put(std::string& out, const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); }
template <class T>
void put(std::string& out, T v) {
  put(out, &v, sizeof v);
}

struct Reader {
  std::string_view in;
  std::size_t at = 0;
  void take(void* p, std::size_t n) {
    if (n > in.size() - at) throw std::runtime_error("replica state: truncated at byte " + std::to_string(at));
    std::memcpy(p, in.data() + at, n);
    at += n;
  }
  template <class T>
  T get() {
    T v;
    take(&v, sizeof v);
    return v;
  }
};

// "cpu", "cuda" (device 0 of what this process sees) or "auto".
torch::Device resolve_device(std::string_view name) {
  if (name == "cpu") return torch::kCPU;
  if (name != "cuda" && name != "auto") {
    throw std::invalid_argument("replica: device \"" + std::string(name) + "\" is not cpu, cuda or auto");
  }
  if (torch::cuda::is_available()) return {torch::kCUDA, 0};
  if (name == "auto") return torch::kCPU;
  throw std::runtime_error(
      "replica: device \"cuda\": this libtorch sees no GPU (torch::cuda::is_available() is false: a CPU-only "
      "libtorch, or no device visible to this process); build against a CUDA or ROCm libtorch, see the README");
}

// The bytes of a contiguous tensor, as a flat uint8 tensor on its device.
torch::Tensor bytes_of_tensor(const torch::Tensor& t) {
  return torch::from_blob(t.data_ptr(), {static_cast<std::int64_t>(t.nbytes())}, t.options().dtype(torch::kUInt8));
}
torch::Tensor host_bytes(const void* p, std::size_t n) {
  return torch::from_blob(const_cast<void*>(p), {static_cast<std::int64_t>(n)}, torch::kUInt8);
}

// Copies n bytes from host memory to byte `at` of a contiguous tensor, and back.
void copy_to_tensor(const torch::Tensor& t, std::size_t at, const void* p, std::size_t n) {
  if (t.is_cpu()) {
    std::memcpy(static_cast<std::byte*>(t.data_ptr()) + at, p, n);
  } else {
    bytes_of_tensor(t).slice(0, static_cast<std::int64_t>(at), static_cast<std::int64_t>(at + n)).copy_(host_bytes(p, n));
  }
}
void copy_from_tensor(const torch::Tensor& t, void* out) {
  if (t.is_cpu()) {
    std::memcpy(out, t.data_ptr(), static_cast<std::size_t>(t.nbytes()));
  } else {
    host_bytes(out, static_cast<std::size_t>(t.nbytes())).copy_(bytes_of_tensor(t));
  }
}

}  // namespace

struct ReplicaCore::Impl {
  ModelSpec spec;
  torch::Device device{torch::kCPU};
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<torch::optim::Adam> optimizer;
  torch::Tensor teacher;
  std::uint64_t step = 0;
  // The committed state, in the order of the format: the parameters, then each one's Adam
  // exp_avg and exp_avg_sq. Adam's state is made at the start (zeros at step 0, what Adam makes
  // on its first step), so loading a state copies into memory that is already there.
  std::vector<torch::Tensor> state;
  std::vector<torch::optim::AdamParamState*> adam;  // per parameter, owned by the optimizer
  std::vector<std::size_t> ends;                    // byte offset where each state tensor's data ends
  std::size_t header_bytes = 0;
  torch::Tensor local;  // the kept gradient, flat, on the device
  torch::Tensor sum;    // on a GPU: what the quorum sums into

  // An in-place load under way (load_begin .. load_end).
  struct Loading {
    bool active = false;
    std::uint64_t step = 0;
    std::vector<std::int64_t> adam_steps;
    std::size_t copied = 0;
  } loading;

  Impl(const ModelSpec& s, torch::Device d) : spec(s), device(d) {
    if (!(spec.dropout >= 0 && spec.dropout < 1)) {
      throw std::invalid_argument("ModelSpec::dropout is " + std::to_string(spec.dropout) + ", not in [0, 1)");
    }
    torch::NoGradGuard no_grad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(spec.seed));
    teacher = torch::randn({spec.inputs, spec.classes}, gen);
    model = torch::nn::Sequential(torch::nn::Linear(spec.inputs, spec.hidden), torch::nn::ReLU(),
                                  torch::nn::Linear(spec.hidden, spec.hidden), torch::nn::ReLU(),
                                  torch::nn::Linear(spec.hidden, spec.classes));
    // Initial weights from the spec's seed, not from the process's global generator.
    for (auto& p : model->parameters()) {
      auto fan_in = p.dim() > 1 ? p.size(1) : spec.hidden;
      p.copy_(torch::randn(p.sizes(), gen) / std::sqrt(static_cast<double>(fan_in)));
    }
    model->to(device);  // made on the CPU from the seed: the same bits on every device
    optimizer = std::make_unique<torch::optim::Adam>(model->parameters(),
                                                     torch::optim::AdamOptions(spec.learning_rate));
    auto params = model->parameters();
    for (auto& p : params) {
      auto s = std::make_unique<torch::optim::AdamParamState>();
      s->step(0);
      s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
      s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
      adam.push_back(s.get());
      optimizer->state()[c10::guts::to_string(p.unsafeGetTensorImpl())] = std::move(s);
    }
    state.assign(params.begin(), params.end());
    for (auto* a : adam) {
      state.push_back(a->exp_avg());
      state.push_back(a->exp_avg_sq());
    }
    for (auto& t : state) {
      if (!t.is_contiguous()) throw std::logic_error("replica state: a tensor is not contiguous");
    }
    std::size_t at = 0;
    for (auto& t : state) ends.push_back(at += static_cast<std::size_t>(t.nbytes()));
    header_bytes = 4 + sizeof(kVersion) + 8 + 8 + 8 * state.size() + 8 * params.size();
    std::int64_t n = 0;
    for (auto& p : params) n += p.numel();
    auto on_device = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    local = torch::zeros({n}, on_device);
    if (!device.is_cpu()) sum = torch::zeros({n}, on_device);
  }

  // The model on a batch, with dropout after each ReLU: its masks drawn on the CPU from `gen`
  // (the same bits on every device), kept units scaled by 1 / (1 - p).
  torch::Tensor forward(torch::Tensor h, at::Generator& gen) {
    const double p = spec.dropout;
    if (p <= 0) return model->forward(h);
    for (auto& layer : model->children()) {
      h = layer->as<torch::nn::Linear>() ? layer->as<torch::nn::Linear>()->forward(h)
                                         : layer->as<torch::nn::ReLU>()->forward(h);
      if (layer->as<torch::nn::ReLU>()) {
        auto keep = torch::bernoulli(torch::full(h.sizes(), 1.0 - p), gen).to(h.device());
        h = h * keep / (1.0 - p);
      }
    }
    return h;
  }

  void step_with(const torch::Tensor& g) {  // g: the averaged gradient, flat, on the device
    std::int64_t at = 0;
    for (auto& p : model->parameters()) {
      p.mutable_grad() = g.slice(0, at, at + p.numel()).view_as(p);
      at += p.numel();
    }
    optimizer->step();
    ++step;
  }

  void need_gpu(const char* what) const {
    if (device.is_cpu()) throw std::logic_error(std::string(what) + ": the model is on the CPU");
  }
  void need_cpu(const char* what) const {
    if (!device.is_cpu()) throw std::logic_error(std::string(what) + ": the model is on a GPU");
  }

  std::size_t data_bytes() const { return ends.empty() ? 0 : ends.back(); }

  std::string header() const {
    std::string out;
    put(out, kMagic, 4);
    put(out, kVersion);
    put(out, step);
    put(out, static_cast<std::uint64_t>(state.size()));
    for (auto& t : state) put(out, static_cast<std::uint64_t>(t.numel()));
    for (auto* a : adam) put(out, static_cast<std::int64_t>(a->step()));
    return out;
  }

  // Checks a header against this model; its step and Adam's step counts.
  Loading parse(std::string_view bytes) const {
    Reader r{bytes};
    char magic[4];
    r.take(magic, 4);
    if (std::memcmp(magic, kMagic, 4) != 0) throw std::runtime_error("replica state: not a sceptre replica state");
    if (auto v = r.get<std::uint32_t>(); v != kVersion) {
      throw std::runtime_error("replica state: version " + std::to_string(v) + ", expected " + std::to_string(kVersion));
    }
    Loading l;
    l.step = r.get<std::uint64_t>();
    auto count = r.get<std::uint64_t>();
    if (count != state.size()) {
      throw std::runtime_error("replica state: " + std::to_string(count) + " tensors, this model has " +
                               std::to_string(state.size()));
    }
    for (std::size_t i = 0; i < state.size(); ++i) {
      if (auto n = r.get<std::uint64_t>(); n != static_cast<std::uint64_t>(state[i].numel())) {
        throw std::runtime_error("replica state: tensor " + std::to_string(i) + " has " + std::to_string(n) + " elements");
      }
    }
    for (std::size_t i = 0; i < adam.size(); ++i) {
      l.adam_steps.push_back(r.get<std::int64_t>());
      if (l.adam_steps.back() < 0) throw std::runtime_error("replica state: a negative Adam step count");
    }
    if (r.at != header_bytes) throw std::logic_error("replica state: header size");
    return l;
  }

  // Copies data bytes [at, at + n) (offsets after the header) into the tensors they belong to.
  void copy_in(std::size_t at, const std::byte* p, std::size_t n) {
    if (n > data_bytes() || at > data_bytes() - n) {
      throw std::runtime_error("replica state: bytes " + std::to_string(at) + "+" + std::to_string(n) +
                               " are past the end of the state");
    }
    auto i = static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), at) - ends.begin());
    while (n > 0) {
      std::size_t begin = i == 0 ? 0 : ends[i - 1];
      std::size_t k = std::min(n, ends[i] - at);
      copy_to_tensor(state[i], at - begin, p, k);
      at += k;
      p += k;
      n -= k;
      ++i;
    }
  }

  void finish(const Loading& l) {
    for (std::size_t i = 0; i < adam.size(); ++i) adam[i]->step(l.adam_steps[i]);
    step = l.step;
  }
};

ReplicaCore::ReplicaCore(const ModelSpec& spec, std::string_view device)
    : impl_(std::make_unique<Impl>(spec, resolve_device(device))) {
  torch::set_num_threads(1);  // one thread per replica: the same bits in every process
}
ReplicaCore::~ReplicaCore() = default;

bool ReplicaCore::gpu_available() { return torch::cuda::is_available(); }
std::string ReplicaCore::device() const { return impl_->device.str(); }
bool ReplicaCore::on_gpu() const { return !impl_->device.is_cpu(); }

float ReplicaCore::compute(std::uint64_t first, std::uint64_t count) {
  auto& m = *impl_;
  // The samples are made on the CPU, from their index: the same on every device.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(m.spec.seed) * 1000003ull + first);
  auto x = torch::randn({static_cast<std::int64_t>(count), m.spec.inputs}, gen);
  auto y = x.matmul(m.teacher).argmax(1);
  m.model->zero_grad();
  auto l = torch::nn::functional::cross_entropy(m.forward(x.to(m.device), gen), y.to(m.device));
  l.backward();
  std::int64_t at = 0;
  for (auto& p : m.model->parameters()) {
    m.local.slice(0, at, at + p.numel()).copy_(p.grad().reshape(-1));
    at += p.numel();
  }
  return l.item<float>();
}

void ReplicaCore::gradient_to(std::span<float> out) const {
  if (out.size() != parameter_count()) throw std::invalid_argument("gradient_to: a buffer of the wrong size");
  copy_from_tensor(impl_->local, out.data());
}

std::vector<float> ReplicaCore::local_gradients(std::uint64_t first, std::uint64_t count, float* loss) {
  float l = compute(first, count);
  if (loss) *loss = l;
  std::vector<float> out(parameter_count());
  gradient_to(out);
  return out;
}

void ReplicaCore::apply(std::span<const float> summed, std::size_t members) {
  auto& m = *impl_;
  if (summed.size() != parameter_count()) throw std::invalid_argument("apply: gradient of the wrong size");
  auto g = torch::from_blob(const_cast<float*>(summed.data()), {static_cast<std::int64_t>(summed.size())},
                            torch::kFloat32);
  m.step_with(g.to(m.device) / static_cast<float>(members));
}

std::span<float> ReplicaCore::sum_buffer() {
  auto& m = *impl_;
  m.need_gpu("sum_buffer");
  m.sum.copy_(m.local);
  torch::cuda::synchronize();  // a collective on a stream of its own reads it next
  return {m.sum.data_ptr<float>(), static_cast<std::size_t>(m.sum.numel())};
}

void ReplicaCore::apply_sum(std::size_t members) {
  auto& m = *impl_;
  m.need_gpu("apply_sum");
  m.step_with(m.sum / static_cast<float>(members));
}

void ReplicaCore::sum_to(std::span<float> out) const {
  impl_->need_gpu("sum_to");
  if (out.size() != parameter_count()) throw std::invalid_argument("sum_to: a buffer of the wrong size");
  copy_from_tensor(impl_->sum, out.data());
}

std::uint64_t ReplicaCore::step() const { return impl_->step; }

std::size_t ReplicaCore::parameter_count() const {
  std::size_t n = 0;
  for (auto& p : impl_->model->parameters()) n += static_cast<std::size_t>(p.numel());
  return n;
}

std::uint64_t ReplicaCore::digest() const {
  auto& m = *impl_;
  auto header = m.header();
  XXH3_state_t* h = XXH3_createState();
  XXH3_64bits_reset(h);
  XXH3_64bits_update(h, header.data(), header.size());
  for (auto& t : m.state) {
    auto host = t.cpu();  // (itself on the CPU)
    XXH3_64bits_update(h, host.data_ptr(), static_cast<std::size_t>(host.nbytes()));
  }
  auto d = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return d;
}

std::string ReplicaCore::save() const {
  std::string out;
  save(out);
  return out;
}

std::size_t ReplicaCore::state_bytes() const { return impl_->header_bytes + impl_->data_bytes(); }

void ReplicaCore::save(std::string& out) const {
  auto& m = *impl_;
  // Into out's own memory (assigning a new string would give up a buffer already touched).
  auto header = m.header();
  out.resize(state_bytes());
  std::memcpy(out.data(), header.data(), header.size());
  std::size_t at = header.size();
  for (auto& t : m.state) {
    copy_from_tensor(t, out.data() + at);
    at += static_cast<std::size_t>(t.nbytes());
  }
}

void ReplicaCore::load(const std::string& bytes) {
  auto& m = *impl_;
  // Everything is checked before anything changes.
  auto l = m.parse(std::string_view(bytes).substr(0, std::min(bytes.size(), m.header_bytes)));
  if (bytes.size() != state_bytes()) {
    throw std::runtime_error("replica state: " + std::to_string(bytes.size()) + " bytes, this model's has " +
                             std::to_string(state_bytes()));
  }
  m.copy_in(0, reinterpret_cast<const std::byte*>(bytes.data()) + m.header_bytes, m.data_bytes());
  m.finish(l);
  m.loading = {};
}

std::size_t ReplicaCore::header_bytes() const { return impl_->header_bytes; }

std::string ReplicaCore::header() const { return impl_->header(); }

std::span<const std::byte> ReplicaCore::live_view(std::uint64_t at, std::size_t n) const {
  auto& m = *impl_;
  m.need_cpu("live_view");
  if (n > m.data_bytes() || at > m.data_bytes() - n) throw std::out_of_range("live_view: past the end of the state");
  auto i = static_cast<std::size_t>(std::upper_bound(m.ends.begin(), m.ends.end(), at) - m.ends.begin());
  std::size_t begin = i == 0 ? 0 : m.ends[i - 1];
  if (n == 0 || i == m.ends.size() || at + n > m.ends[i]) return {};
  return {static_cast<const std::byte*>(m.state[i].data_ptr()) + (at - begin), n};
}

void ReplicaCore::copy_live(std::uint64_t at, void* out, std::size_t n) const {
  auto& m = *impl_;
  m.need_cpu("copy_live");
  if (n > m.data_bytes() || at > m.data_bytes() - n) throw std::out_of_range("copy_live: past the end of the state");
  auto* o = static_cast<std::byte*>(out);
  auto i = static_cast<std::size_t>(std::upper_bound(m.ends.begin(), m.ends.end(), at) - m.ends.begin());
  while (n > 0) {
    std::size_t begin = i == 0 ? 0 : m.ends[i - 1];
    std::size_t k = std::min<std::size_t>(n, m.ends[i] - at);
    std::memcpy(o, static_cast<const std::byte*>(m.state[i].data_ptr()) + (at - begin), k);
    at += k;
    o += k;
    n -= k;
    ++i;
  }
}

void ReplicaCore::load_begin(std::string_view header) {
  auto& m = *impl_;
  if (header.size() != m.header_bytes) {
    throw std::runtime_error("replica state: a header of " + std::to_string(header.size()) + " bytes, this model's has " +
                             std::to_string(m.header_bytes));
  }
  m.loading = m.parse(header);
  m.loading.active = true;
}

void ReplicaCore::load_data(std::uint64_t at, const void* data, std::size_t n) {
  auto& m = *impl_;
  if (!m.loading.active) throw std::logic_error("load_data without load_begin");
  m.copy_in(static_cast<std::size_t>(at), static_cast<const std::byte*>(data), n);
  m.loading.copied += n;
}

void ReplicaCore::load_end() {
  auto& m = *impl_;
  if (!m.loading.active) throw std::logic_error("load_end without load_begin");
  auto l = std::move(m.loading);
  m.loading = {};
  if (l.copied != m.data_bytes()) {
    throw std::runtime_error("replica state: " + std::to_string(l.copied) + " of " + std::to_string(m.data_bytes()) +
                             " data bytes came");
  }
  m.finish(l);
}

namespace {
// (In memory that the checkpoint writer's write() reads fast: see io_copy.)
std::string bytes_of(const torch::Tensor& t) {
  auto c = t.contiguous().cpu();
  return io_copy(c.data_ptr(), static_cast<std::size_t>(c.nbytes()));
}
}  // namespace

std::vector<TensorBytes> ReplicaCore::tensors(std::size_t shard, std::size_t shards) const {
  auto& m = *impl_;
  auto named = m.model->named_parameters();
  // The list without data first (names, dtypes, shapes, sizes), so only this shard is copied.
  struct Entry {
    std::string name;
    torch::Tensor t;
    std::int64_t step = -1;  // an Adam step count instead of a tensor
  };
  std::vector<Entry> entries;
  for (auto& p : named) entries.push_back({"model." + p.key(), p.value()});
  for (std::size_t i = 0; i < named.size(); ++i) {
    auto& key = named[i].key();
    entries.push_back({"adam.exp_avg." + key, m.adam[i]->exp_avg()});
    entries.push_back({"adam.exp_avg_sq." + key, m.adam[i]->exp_avg_sq()});
    entries.push_back({"adam.step." + key, {}, m.adam[i]->step()});
  }
  std::vector<std::uint64_t> sizes;
  for (auto& e : entries) sizes.push_back(e.step >= 0 ? 8 : static_cast<std::uint64_t>(e.t.nbytes()));
  auto owner = assign_shards(sizes, shards);
  std::vector<TensorBytes> out;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (owner[i] != shard) continue;
    auto& e = entries[i];
    if (e.step >= 0) {
      out.push_back({e.name, "I64", {}, std::string(reinterpret_cast<const char*>(&e.step), 8)});
    } else {
      out.push_back({e.name, "F32", std::vector<std::int64_t>(e.t.sizes().begin(), e.t.sizes().end()), bytes_of(e.t)});
    }
  }
  return out;
}

void ReplicaCore::load_tensors(const std::vector<TensorBytes>& tensors, std::uint64_t step) {
  auto& m = *impl_;
  std::map<std::string, const TensorBytes*> by_name;
  for (auto& t : tensors) {
    if (!by_name.emplace(t.name, &t).second) throw std::runtime_error("checkpoint: tensor " + t.name + " twice");
  }
  auto named = m.model->named_parameters();
  auto take = [&](const std::string& name, const torch::Tensor& like) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw std::runtime_error("checkpoint: no tensor " + name);
    auto& t = *it->second;
    if (t.dtype != "F32" || t.shape != std::vector<std::int64_t>(like.sizes().begin(), like.sizes().end()) ||
        t.data.size() != static_cast<std::size_t>(like.nbytes())) {
      throw std::runtime_error("checkpoint: tensor " + name + " does not have this model's dtype and shape");
    }
    auto out = torch::empty(like.sizes(), torch::kFloat32);
    std::memcpy(out.data_ptr<float>(), t.data.data(), t.data.size());
    by_name.erase(it);
    return out;
  };
  std::vector<torch::Tensor> params, avg, avg_sq;
  std::vector<std::int64_t> steps;
  for (auto& p : named) params.push_back(take("model." + p.key(), p.value()));
  bool stepped = by_name.count("adam.exp_avg." + named[0].key()) > 0;
  if (stepped) {
    for (auto& p : named) {
      avg.push_back(take("adam.exp_avg." + p.key(), p.value()));
      avg_sq.push_back(take("adam.exp_avg_sq." + p.key(), p.value()));
      auto it = by_name.find("adam.step." + p.key());
      if (it == by_name.end() || it->second->dtype != "I64" || it->second->data.size() != 8) {
        throw std::runtime_error("checkpoint: no I64 adam.step." + p.key());
      }
      std::int64_t s;
      std::memcpy(&s, it->second->data.data(), 8);
      steps.push_back(s);
      by_name.erase(it);
    }
  }
  if (!by_name.empty()) throw std::runtime_error("checkpoint: tensor " + by_name.begin()->first + " is not in this model");
  // Into the state's own tensors. A checkpoint without Adam's state (of an optimizer that had
  // not stepped) leaves it as a fresh one: zeros at step 0.
  torch::NoGradGuard no_grad;
  auto live = m.model->parameters();
  for (std::size_t i = 0; i < live.size(); ++i) {
    live[i].copy_(params[i]);
    if (stepped) {
      m.adam[i]->exp_avg().copy_(avg[i]);
      m.adam[i]->exp_avg_sq().copy_(avg_sq[i]);
    } else {
      m.adam[i]->exp_avg().zero_();
      m.adam[i]->exp_avg_sq().zero_();
    }
    m.adam[i]->step(stepped ? steps[i] : 0);
  }
  m.step = step;
}

}  // namespace sceptre::train
