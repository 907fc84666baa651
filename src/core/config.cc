#include "sceptre/core/config.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

namespace sceptre {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;  // to_json keeps the table's order: easier to read
using std::chrono::milliseconds;

Error invalid(std::string message) { return Error(Code::kInvalidArgument, std::move(message)); }

std::string quote(std::string_view text) { return "\"" + std::string(text) + "\""; }

// A kind of value: how it is read from JSON and from an environment variable, and written back.
// The text form is also what describe() shows as the default. Errors say what was expected
// without naming the key; the field adds the key.
struct SizeKind {
  std::size_t min = 0;

  std::string type() const { return min == 0 ? "integer" : "integer >= " + std::to_string(min); }
  Result<std::size_t> check(std::uint64_t v, std::string_view got) const {
    if (v < min || v > std::numeric_limits<std::size_t>::max()) {
      return invalid("must be an integer >= " + std::to_string(min) + ", got " + std::string(got));
    }
    return static_cast<std::size_t>(v);
  }
  Result<std::size_t> from_json(const Json& j) const {
    // nlohmann holds every non-negative integer it parses as unsigned: anything else is wrong.
    if (!j.is_number_unsigned()) {
      return invalid("must be an integer >= " + std::to_string(min) + ", got " + j.dump());
    }
    return check(j.get<std::uint64_t>(), j.dump());
  }
  Result<std::size_t> from_text(std::string_view text) const {
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) {
      return invalid("must be an integer >= " + std::to_string(min) + ", got " + quote(text));
    }
    return check(v, quote(text));
  }
  OrderedJson to_json(std::size_t v) const { return v; }
  std::string to_text(std::size_t v) const { return std::to_string(v); }
};

// Durations: a bare integer is milliseconds; a unit may follow (ms, s, m, h).
struct DurationKind {
  milliseconds min{0};

  std::string type() const { return min.count() == 0 ? "duration" : "duration >= " + to_text(min); }
  std::string expected() const {
    return "must be a duration >= " + to_text(min) +
           " (integer milliseconds, or a string such as \"250ms\", \"30s\", \"2m\")";
  }
  Result<milliseconds> check(milliseconds v, const std::string& got) const {
    if (v < min) return invalid(expected() + ", got " + got);
    return v;
  }
  Result<milliseconds> from_json(const Json& j) const {
    if (j.is_string()) return from_text(j.get<std::string>());
    // Negative integers and fractions are not unsigned.
    auto max = static_cast<std::uint64_t>(milliseconds::max().count());
    if (!j.is_number_unsigned() || j.get<std::uint64_t>() > max) {
      return invalid(expected() + ", got " + j.dump());
    }
    return check(milliseconds(static_cast<milliseconds::rep>(j.get<std::uint64_t>())), j.dump());
  }
  Result<milliseconds> from_text(std::string_view text) const {
    std::uint64_t n = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    std::string_view unit(end, text.data() + text.size() - end);
    std::uint64_t scale = unit == "" || unit == "ms" ? 1
                          : unit == "s"              ? 1'000
                          : unit == "m"              ? 60'000
                          : unit == "h"              ? 3'600'000
                                                     : 0;
    auto max = static_cast<std::uint64_t>(milliseconds::max().count());
    if (ec != std::errc() || end == text.data() || scale == 0 || n > max / scale) {
      return invalid(expected() + ", got " + quote(text));
    }
    return check(milliseconds(static_cast<milliseconds::rep>(n * scale)), quote(text));
  }
  OrderedJson to_json(milliseconds v) const { return to_text(v); }
  // The largest unit that states `v` exactly: 30000 -> "30s", 1500 -> "1500ms".
  std::string to_text(milliseconds v) const {
    auto ms = v.count();
    if (ms != 0 && ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
    if (ms != 0 && ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
    if (ms != 0 && ms % 1'000 == 0) return std::to_string(ms / 1'000) + "s";
    return std::to_string(ms) + "ms";
  }
};

// A string that must be one of a fixed set.
struct ChoiceKind {
  std::vector<std::string_view> choices;

  std::string type() const {
    std::string out;
    for (std::size_t i = 0; i < choices.size(); ++i) {
      if (i) out += i + 1 == choices.size() ? " or " : ", ";
      out += "`" + std::string(choices[i]) + "`";
    }
    return out;
  }
  std::string expected() const {
    std::string out = "must be one of ";
    for (std::size_t i = 0; i < choices.size(); ++i) out += (i ? ", " : "") + quote(choices[i]);
    return out;
  }
  Result<std::string> from_json(const Json& j) const {
    if (!j.is_string()) return invalid(expected() + ", got " + j.dump());
    return from_text(j.get<std::string>());
  }
  Result<std::string> from_text(std::string_view text) const {
    for (std::string_view c : choices) {
      if (c == text) return std::string(text);
    }
    return invalid(expected() + ", got " + quote(text));
  }
  OrderedJson to_json(const std::string& v) const { return v; }
  std::string to_text(const std::string& v) const { return v; }
};

// JSON takes only true/false; the environment also takes 0/1, as shells write flags.
struct BoolKind {
  std::string type() const { return "bool"; }
  Result<bool> from_json(const Json& j) const {
    if (!j.is_boolean()) return invalid("must be true or false, got " + j.dump());
    return j.get<bool>();
  }
  Result<bool> from_text(std::string_view text) const {
    if (text == "1" || text == "true") return true;
    if (text == "0" || text == "false") return false;
    return invalid("must be 0, 1, true or false, got " + quote(text));
  }
  OrderedJson to_json(bool v) const { return v; }
  std::string to_text(bool v) const { return v ? "true" : "false"; }
};

// One row of the table: a field of Config, its kind and its documentation.
struct Field {
  std::string name;
  std::string env;   // SCEPTRE_<NAME>
  std::string type;  // for describe()
  std::string doc;
  std::function<Status(Config&, const Json&)> set_json;
  std::function<Status(Config&, std::string_view)> set_text;
  std::function<OrderedJson(const Config&)> get_json;
  std::function<std::string(const Config&)> get_text;
};

// Prefixes a kind's error with the key (or variable) it was read for.
Error named(std::string_view key, const Error& error) {
  return invalid(std::string(key) + ": " + error.message());
}

template <class T, class Kind>
Field field(std::string name, T Config::*member, Kind kind, std::string doc) {
  Field f;
  f.env = "SCEPTRE_" + name;
  for (char& c : f.env) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  f.type = kind.type();
  f.doc = std::move(doc);
  f.set_json = [name, member, kind](Config& c, const Json& j) -> Status {
    auto v = kind.from_json(j);
    if (!v.ok()) return named(name, v.error());
    c.*member = std::move(*v);
    return ok_status();
  };
  f.set_text = [env = f.env, member, kind](Config& c, std::string_view text) -> Status {
    auto v = kind.from_text(text);
    if (!v.ok()) return named(env, v.error());
    c.*member = std::move(*v);
    return ok_status();
  };
  f.get_json = [member, kind](const Config& c) { return kind.to_json(c.*member); };
  f.get_text = [member, kind](const Config& c) { return kind.to_text(c.*member); };
  f.name = std::move(name);
  return f;
}

// THE table: every field of Config, once. The docs must not contain '|' (they are table cells).
const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = {
      field("cast_fanout", &Config::cast_fanout, SizeKind{2},
            "Children per node of the tree a cast travels down: a smaller fanout means a deeper "
            "tree and less sending per proc."),
      field("cast_root_fanout", &Config::cast_root_fanout, SizeKind{1},
            "Children of the sender's own node, the first level of a cast's tree: with 1 the sender "
            "hands the whole cast to the mesh's first proc and sends and receives one message per "
            "cast, whatever the size of the mesh."),
      field("spawn_timeout", &Config::spawn_timeout, DurationKind{milliseconds(1)},
            "How long `spawn_procs` and `spawn` wait for every member of a mesh before they fail."),
      field("stop_timeout", &Config::stop_timeout, DurationKind{},
            "How long a graceful stop of actors and procs may take before it is forced."),
      field("transport", &Config::transport, ChoiceKind{{"unix", "tcp", "netns"}},
            "The channel transport procs serve: Unix sockets (one host), TCP, or TCP on a bridge the "
            "controller makes so that hosts launched in network namespaces reach it (needs root)."),
      field("log_fold", &Config::log_fold, BoolKind{},
            "Fold identical output lines from many ranks into one line with a count."),
      field("log_fold_window", &Config::log_fold_window, DurationKind{},
            "How long an output line waits for identical lines from other ranks before it is printed."),
      field("stderr_tail_lines", &Config::stderr_tail_lines, SizeKind{0},
            "How many of the last lines of a failed proc's stderr its error carries."),
      field("log_level", &Config::log_level,
            ChoiceKind{{"trace", "debug", "info", "warn", "error", "off"}},
            "The least severe runtime log message that is printed."),
      field("heartbeat_interval", &Config::heartbeat_interval, DurationKind{milliseconds(1)},
            "How often every proc sends the controller a heartbeat, on a channel of its own (not "
            "the one its actors' messages use)."),
      field("heartbeat_timeout", &Config::heartbeat_timeout, DurationKind{milliseconds(1)},
            "How long the controller hears nothing from a proc before it declares the proc lost "
            "(frozen, or cut off), kills it and reports the failure. Keep it several intervals "
            "long: a busy but alive proc must never be declared dead."),
      field("watchdog_timeout", &Config::watchdog_timeout, DurationKind{},
            "How long one handler of an actor may run before the proc reports the actor stuck (with "
            "its endpoint and how long it has run); 0 switches the watchdog off. The actor is not "
            "killed."),
      field("orphan_timeout", &Config::orphan_timeout, DurationKind{},
            "How long a proc goes on when its controller acknowledges nothing on the health channel "
            "(frozen, or cut off): then the proc stops itself. 0: never. A controller that ends in "
            "any way ends its procs at once through their lifelines; this is for one that does not end."),
      field("gpu_health_interval", &Config::gpu_health_interval, DurationKind{},
            "How often a host polls the health of the GPUs its procs are bound to (NVML, ROCm SMI): "
            "a proc whose GPU reports uncorrectable ECC errors, retired pages, loss from the bus or "
            "lasting hardware throttling is killed and its failure says why. 0: never."),
      field("io_poll_us", &Config::io_poll_us, SizeKind{0},
            "The longest a channel I/O thread (every proc has one) polls its sockets for the next "
            "event before it sleeps, in microseconds, yielding the CPU between polls. A message "
            "that arrives meanwhile needs no wake-up, which across cores costs tens of "
            "microseconds on a VM. The window shrinks to nothing while events are further apart "
            "than this and grows back while they come closer. 0: always sleep at once."),
      field("proc_zygote", &Config::proc_zygote, BoolKind{},
            "Start procs by forking them from a zygote: a process of the binary, started once per "
            "host, that waits inside the Runtime's constructor. A proc then starts in milliseconds "
            "instead of paying its libraries' initialisation again (about 0.25 s of CPU with "
            "libtorch). Code in main() before the Runtime runs once, in the zygote. A proc whose "
            "environment differs from the one the host started with in more than sceptre's and the "
            "GPU runtimes' variables, and one started through a wrapper, is executed afresh."),
  };
  return kFields;
}

const Field* find_field(std::string_view name) {
  for (const Field& f : fields()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string known_keys() {
  std::string out;
  for (const Field& f : fields()) out += (out.empty() ? "" : ", ") + f.name;
  return out;
}

}  // namespace

Result<Config> Config::from_json(std::string_view json_text, Config base) {
  Json j;
  try {
    j = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::parse_error& e) {
    return invalid(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return invalid("configuration must be a JSON object, got " + j.dump());
  for (const auto& [key, value] : j.items()) {
    const Field* f = find_field(key);
    if (!f) return invalid("unknown key " + quote(key) + "; known keys: " + known_keys());
    SCEPTRE_RETURN_IF_ERROR(f->set_json(base, value));
  }
  return base;
}

Result<Config> Config::from_json(std::string_view json_text) { return from_json(json_text, Config{}); }

Result<Config> Config::from_file(const std::string& path, Config base) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Error(Code::kNotFound, "cannot open: " + std::string(std::strerror(errno)))
        .with_context("config file " + path);
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return invalid("cannot read").with_context("config file " + path);
  auto config = from_json(text.str(), std::move(base));
  if (!config.ok()) return std::move(config).error().with_context("config file " + path);
  return config;
}

Result<Config> Config::from_file(const std::string& path) { return from_file(path, Config{}); }

Result<Config> Config::from_env() { return from_env(Config{}, ::getenv); }

Result<Config> Config::from_env(Config base, std::function<const char*(const char*)> getenv) {
  SCEPTRE_CHECK(getenv);
  for (const Field& f : fields()) {
    const char* value = getenv(f.env.c_str());
    if (value == nullptr || *value == '\0') continue;
    SCEPTRE_RETURN_IF_ERROR(f.set_text(base, value));
  }
  return base;
}

Result<Config> Config::load(std::function<const char*(const char*)> getenv) {
  SCEPTRE_CHECK(getenv);
  Config config;
  if (const char* path = getenv("SCEPTRE_CONFIG_FILE"); path != nullptr && *path != '\0') {
    auto from = from_file(path, config);
    if (!from.ok()) return std::move(from).error().with_context("SCEPTRE_CONFIG_FILE");
    config = std::move(*from);
  }
  if (const char* text = getenv("SCEPTRE_CONFIG"); text != nullptr && *text != '\0') {
    auto from = from_json(text, config);
    if (!from.ok()) return std::move(from).error().with_context("SCEPTRE_CONFIG");
    config = std::move(*from);
  }
  return from_env(std::move(config), getenv);
}

std::string Config::to_json() const {
  OrderedJson j = OrderedJson::object();
  for (const Field& f : fields()) j[f.name] = f.get_json(*this);
  return j.dump();
}

std::string Config::describe() {
  std::string out =
      "| Field | Environment variable | Type | Default | Meaning |\n"
      "|---|---|---|---|---|\n";
  const Config defaults;
  for (const Field& f : fields()) {
    out += "| `" + f.name + "` | `" + f.env + "` | " + f.type + " | `" + f.get_text(defaults) + "` | " +
           f.doc + " |\n";
  }
  return out;
}

}  // namespace sceptre
