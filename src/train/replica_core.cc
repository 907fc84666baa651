// The only file of the train layer that includes libtorch.
#include "sceptre/train/replica_core.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <stdexcept>

namespace sceptre::train {

namespace {

constexpr std::uint64_t kFnvOffset = 1469598103934665603ull;
constexpr std::uint64_t kFnvPrime = 1099511628211ull;

std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

// The state format: "SCPT" u32 version, u64 step, u64 tensors; then per tensor u64 elements
// and its float32 bytes: every parameter, then (once the optimizer has stepped) each parameter's
// Adam exp_avg and exp_avg_sq, and an i64 Adam step count per parameter.
constexpr char kMagic[4] = {'S', 'C', 'P', 'T'};
constexpr std::uint32_t kVersion = 1;

void put(std::string& out, const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); }
template <class T>
void put(std::string& out, T v) {
  put(out, &v, sizeof v);
}

struct Reader {
  const std::string& in;
  std::size_t at = 0;
  void take(void* p, std::size_t n) { std::memcpy(p, in.data() + skip(n), n); }
  // Passes over `n` bytes; where they begin.
  std::size_t skip(std::size_t n) {
    if (n > in.size() - at) throw std::runtime_error("replica state: truncated at byte " + std::to_string(at));
    at += n;
    return at - n;
  }
  template <class T>
  T get() {
    T v;
    take(&v, sizeof v);
    return v;
  }
};

}  // namespace

struct ReplicaCore::Impl {
  ModelSpec spec;
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<torch::optim::Adam> optimizer;
  torch::Tensor teacher;
  std::uint64_t step = 0;

  explicit Impl(const ModelSpec& s) : spec(s) {
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
    optimizer = std::make_unique<torch::optim::Adam>(model->parameters(),
                                                     torch::optim::AdamOptions(spec.learning_rate));
  }

  torch::optim::AdamParamState* adam_state(const torch::Tensor& p) {
    auto& state = optimizer->state();
    auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == state.end()) return nullptr;
    return static_cast<torch::optim::AdamParamState*>(it->second.get());
  }
};

ReplicaCore::ReplicaCore(const ModelSpec& spec) : impl_(std::make_unique<Impl>(spec)) {
  torch::set_num_threads(1);  // one thread per replica: the same bits in every process
}
ReplicaCore::~ReplicaCore() = default;

std::vector<float> ReplicaCore::local_gradients(std::uint64_t first, std::uint64_t count, float* loss) {
  auto& m = *impl_;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(m.spec.seed) * 1000003ull + first);
  auto x = torch::randn({static_cast<std::int64_t>(count), m.spec.inputs}, gen);
  auto y = x.matmul(m.teacher).argmax(1);
  m.model->zero_grad();
  auto l = torch::nn::functional::cross_entropy(m.model->forward(x), y);
  l.backward();
  if (loss) *loss = l.item<float>();
  std::vector<torch::Tensor> flat;
  for (auto& p : m.model->parameters()) flat.push_back(p.grad().reshape({-1}));
  auto all = torch::cat(flat).contiguous();
  std::vector<float> out(static_cast<std::size_t>(all.numel()));
  std::memcpy(out.data(), all.data_ptr<float>(), out.size() * sizeof(float));
  return out;
}

void ReplicaCore::apply(const std::vector<float>& summed, std::size_t members) {
  auto& m = *impl_;
  if (summed.size() != parameter_count()) throw std::invalid_argument("apply: gradient of the wrong size");
  auto g = torch::from_blob(const_cast<float*>(summed.data()), {static_cast<std::int64_t>(summed.size())},
                            torch::kFloat32) / static_cast<float>(members);
  std::int64_t at = 0;
  for (auto& p : m.model->parameters()) {
    p.mutable_grad() = g.slice(0, at, at + p.numel()).view_as(p).clone();
    at += p.numel();
  }
  m.optimizer->step();
  ++m.step;
}

std::uint64_t ReplicaCore::step() const { return impl_->step; }

std::size_t ReplicaCore::parameter_count() const {
  std::size_t n = 0;
  for (auto& p : impl_->model->parameters()) n += static_cast<std::size_t>(p.numel());
  return n;
}

std::uint64_t ReplicaCore::digest() const {
  std::string s = save();
  return fnv(kFnvOffset, s.data(), s.size());
}

std::string ReplicaCore::save() const {
  std::string out;
  save(out);
  return out;
}

// save()'s layout: magic, version, step, count; per tensor its length and floats; Adam's steps.
std::size_t ReplicaCore::state_bytes() const {
  auto n = impl_->model->parameters().size();
  return 4 + sizeof(kVersion) + 8 + 8 + 3 * n * 8 + 3 * parameter_count() * sizeof(float) + n * 8;
}

void ReplicaCore::save(std::string& out) const {
  auto& m = *impl_;
  auto params = m.model->parameters();
  std::vector<torch::Tensor> tensors(params.begin(), params.end());
  std::vector<std::int64_t> adam_steps;
  bool stepped = m.adam_state(params[0]) != nullptr;
  if (stepped) {
    for (auto& p : params) {
      auto* s = m.adam_state(p);
      tensors.push_back(s->exp_avg());
      tensors.push_back(s->exp_avg_sq());
      adam_steps.push_back(s->step());
    }
  }
  out.clear();
  put(out, kMagic, 4);
  put(out, kVersion);
  put(out, m.step);
  put(out, static_cast<std::uint64_t>(tensors.size()));
  for (auto& t : tensors) {
    auto c = t.contiguous();
    put(out, static_cast<std::uint64_t>(c.numel()));
    put(out, c.data_ptr<float>(), static_cast<std::size_t>(c.numel()) * sizeof(float));
  }
  for (auto s : adam_steps) put(out, s);
}

void ReplicaCore::load(const std::string& bytes) {
  auto& m = *impl_;
  Reader r{bytes};
  char magic[4];
  r.take(magic, 4);
  if (std::memcmp(magic, kMagic, 4) != 0) throw std::runtime_error("replica state: not a sceptre replica state");
  if (auto v = r.get<std::uint32_t>(); v != kVersion) {
    throw std::runtime_error("replica state: version " + std::to_string(v) + ", expected " + std::to_string(kVersion));
  }
  auto step = r.get<std::uint64_t>();
  auto count = r.get<std::uint64_t>();
  auto params = m.model->parameters();
  if (count != params.size() && count != 3 * params.size()) {
    throw std::runtime_error("replica state: " + std::to_string(count) + " tensors for a model of " +
                             std::to_string(params.size()) + " parameters");
  }
  // First the whole layout is checked (nothing changes on an error), then the bytes are copied
  // once, straight into the parameters and into new optimizer state: on a VM, first touches of
  // new memory cost more than the copy, so no staging tensors.
  std::vector<std::size_t> offsets;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto n = r.get<std::uint64_t>();
    // Parameters first, then each parameter's exp_avg and exp_avg_sq.
    const auto& like = params[i < params.size() ? i : (i - params.size()) / 2];
    if (n != static_cast<std::uint64_t>(like.numel())) {
      throw std::runtime_error("replica state: tensor " + std::to_string(i) + " has " + std::to_string(n) + " elements");
    }
    offsets.push_back(r.skip(n * sizeof(float)));
  }
  std::vector<std::int64_t> adam_steps;
  if (count == 3 * params.size()) {
    for (std::size_t i = 0; i < params.size(); ++i) adam_steps.push_back(r.get<std::int64_t>());
  }
  if (r.at != bytes.size()) throw std::runtime_error("replica state: trailing bytes");
  auto fill = [&](torch::Tensor t, std::size_t i) {  // t: contiguous float32, of tensor i's size
    std::memcpy(t.data_ptr<float>(), bytes.data() + offsets[i], static_cast<std::size_t>(t.numel()) * sizeof(float));
    return t;
  };
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto c = fill(params[i].contiguous(), i);  // the model's own storage
    if (!c.is_same(params[i])) params[i].copy_(c);
  }
  auto tensor_at = [&](std::size_t i, const torch::Tensor& like) { return fill(torch::empty(like.sizes(), torch::kFloat32), i); };
  m.optimizer->state().clear();
  for (std::size_t i = 0; i < adam_steps.size(); ++i) {
    auto s = std::make_unique<torch::optim::AdamParamState>();
    s->step(adam_steps[i]);
    s->exp_avg(tensor_at(params.size() + 2 * i, params[i]));
    s->exp_avg_sq(tensor_at(params.size() + 2 * i + 1, params[i]));
    m.optimizer->state()[c10::guts::to_string(params[i].unsafeGetTensorImpl())] = std::move(s);
  }
  m.step = step;
}

namespace {
std::string bytes_of(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.nbytes()));
}
}  // namespace

std::vector<TensorBytes> ReplicaCore::tensors(std::size_t shard, std::size_t shards) const {
  auto& m = *impl_;
  auto named = m.model->named_parameters();
  bool stepped = m.adam_state(named[0].value()) != nullptr;
  // The list without data first (names, dtypes, shapes, sizes), so only this shard is copied.
  struct Entry {
    std::string name;
    torch::Tensor t;
    std::int64_t step = -1;  // an Adam step count instead of a tensor
  };
  std::vector<Entry> entries;
  for (auto& p : named) entries.push_back({"model." + p.key(), p.value()});
  if (stepped) {
    for (auto& p : named) {
      auto* s = m.adam_state(p.value());
      entries.push_back({"adam.exp_avg." + p.key(), s->exp_avg()});
      entries.push_back({"adam.exp_avg_sq." + p.key(), s->exp_avg_sq()});
      entries.push_back({"adam.step." + p.key(), {}, s->step()});
    }
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
  torch::NoGradGuard no_grad;
  auto live = m.model->parameters();
  for (std::size_t i = 0; i < live.size(); ++i) live[i].copy_(params[i]);
  m.optimizer->state().clear();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    auto s = std::make_unique<torch::optim::AdamParamState>();
    s->step(steps[i]);
    s->exp_avg(avg[i]);
    s->exp_avg_sq(avg_sq[i]);
    m.optimizer->state()[c10::guts::to_string(live[i].unsafeGetTensorImpl())] = std::move(s);
  }
  m.step = step;
}

}  // namespace sceptre::train
