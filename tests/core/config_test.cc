#include "sceptre/core/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace sceptre {
namespace {

using std::chrono::milliseconds;

// A getenv over a fixed map, for from_env and load.
std::function<const char*(const char*)> fake_env(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// A Config with every field away from its default.
Config all_changed() {
  Config c;
  c.cast_fanout = 3;
  c.spawn_timeout = milliseconds(1'500);
  c.stop_timeout = milliseconds(120'000);
  c.transport = "tcp";
  c.log_fold = false;
  c.log_fold_window = milliseconds(0);
  c.stderr_tail_lines = 0;
  c.log_level = "debug";
  c.heartbeat_interval = milliseconds(250);
  c.heartbeat_timeout = milliseconds(3'000);
  c.watchdog_timeout = milliseconds(0);
  c.orphan_timeout = milliseconds(90'000);
  c.gpu_health_interval = milliseconds(250);
  c.io_poll_us = 0;
  c.proc_zygote = false;
  return c;
}

// The number of fields of an aggregate: the most initializers `T{...}` accepts.
struct AnyValue {
  template <class T>
  operator T() const;  // NOLINT: only named in unevaluated contexts
};
template <class T, class... A>
constexpr std::size_t field_count() {
  if constexpr (requires { T{A{}..., AnyValue{}}; }) {
    return field_count<T, A..., AnyValue>();
  } else {
    return sizeof...(A);
  }
}

std::size_t describe_rows() {
  std::string table = Config::describe();
  return static_cast<std::size_t>(std::count(table.begin(), table.end(), '\n')) - 2;  // less the header
}

TEST(Config, EveryFieldHasARowInTheTable) {
  // Fails when a field is added to Config without its row in config.cc.
  EXPECT_EQ(field_count<Config>(), describe_rows());
  EXPECT_NE(all_changed(), Config{});  // and all_changed() must then change it too
}

TEST(Config, ToJsonRoundTripsEveryField) {
  for (const Config& c : {Config{}, all_changed()}) {
    std::string text = c.to_json();
    EXPECT_EQ(text.find('\n'), std::string::npos) << "must fit in one environment variable";
    auto back = Config::from_json(text);
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    EXPECT_EQ(*back, c) << text;
  }
  EXPECT_EQ(Config{}.to_json(),
            R"({"cast_fanout":16,"cast_root_fanout":1,"spawn_timeout":"30s","stop_timeout":"5s","transport":"unix",)"
            R"("log_fold":true,"log_fold_window":"100ms","stderr_tail_lines":20,"log_level":"info",)"
            R"("heartbeat_interval":"100ms","heartbeat_timeout":"800ms","watchdog_timeout":"5m",)"
            R"("orphan_timeout":"1m","gpu_health_interval":"1s","io_poll_us":50,"proc_zygote":true})");
}

TEST(Config, FromJsonChangesOnlyThePresentKeys) {
  Config base = all_changed();
  auto c = Config::from_json(R"({"cast_fanout": 8, "log_fold": true})", base);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  Config expected = base;
  expected.cast_fanout = 8;
  expected.log_fold = true;
  EXPECT_EQ(*c, expected);
  EXPECT_EQ(*Config::from_json("{}", base), base);
}

TEST(Config, DurationsAreMillisecondsOrHaveAUnit) {
  const std::pair<const char*, milliseconds> cases[] = {
      {"250", milliseconds(250)},      {R"("250ms")", milliseconds(250)}, {R"("30s")", milliseconds(30'000)},
      {R"("2m")", milliseconds(120'000)}, {R"("1h")", milliseconds(3'600'000)}, {R"("7")", milliseconds(7)},
  };
  for (const auto& [json, expected] : cases) {
    auto c = Config::from_json(std::string(R"({"spawn_timeout": )") + json + "}");
    ASSERT_TRUE(c.ok()) << json << ": " << c.error().to_string();
    EXPECT_EQ(c->spawn_timeout, expected) << json;
  }
  for (const char* bad : {R"("30x")", R"("s")", R"("1.5s")", R"(" 5s")", R"("-5")", "-1", "1.5", "true",
                          R"("99999999999999999999h")", R"("9999999999999999h")", "0"}) {
    auto c = Config::from_json(std::string(R"({"spawn_timeout": )") + bad + "}");
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.error().code(), Code::kInvalidArgument);
    EXPECT_NE(c.error().message().find("spawn_timeout"), std::string::npos) << c.error().message();
  }
  // A zero stop timeout is allowed: it means "force at once".
  EXPECT_EQ(Config::from_json(R"({"stop_timeout": 0})")->stop_timeout, milliseconds(0));
}

TEST(Config, WrongTypesAndOutOfRangeValuesNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"cast_fanout": 1})", "cast_fanout"},      {R"({"cast_fanout": -3})", "cast_fanout"},
      {R"({"cast_fanout": "8"})", "cast_fanout"},    {R"({"cast_fanout": 8.5})", "cast_fanout"},
      {R"({"transport": "udp"})", "transport"},      {R"({"transport": 1})", "transport"},
      {R"({"log_fold": 1})", "log_fold"},            {R"({"log_level": "verbose"})", "log_level"},
      {R"({"stderr_tail_lines": null})", "stderr_tail_lines"},
  };
  for (const auto& [json, key] : cases) {
    auto c = Config::from_json(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_EQ(c.error().code(), Code::kInvalidArgument) << json;
    EXPECT_EQ(c.error().message().rfind(key, 0), 0u) << c.error().message();
  }
}

TEST(Config, UnknownKeyIsNamedAndTheKnownOnesListed) {
  auto c = Config::from_json(R"({"cast_fanuot": 8})");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), Code::kInvalidArgument);
  EXPECT_NE(c.error().message().find("\"cast_fanuot\""), std::string::npos);
  EXPECT_NE(c.error().message().find("cast_fanout, cast_root_fanout, spawn_timeout"), std::string::npos) << c.error().message();
}

TEST(Config, TextThatIsNotAJsonObjectIsRejected) {
  for (const char* bad : {"", "{", "[1]", "8", R"({"cast_fanout": 8,})"}) {
    auto c = Config::from_json(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.error().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(Config, FromEnvReadsSceptreVariables) {
  auto c = Config::from_env({}, fake_env({{"SCEPTRE_CAST_FANOUT", "8"},
                                          {"SCEPTRE_LOG_FOLD", "0"},
                                          {"SCEPTRE_SPAWN_TIMEOUT", "10s"},
                                          {"SCEPTRE_TRANSPORT", "tcp"},
                                          {"SCEPTRE_LOG_LEVEL", ""},  // empty: left alone
                                          {"CAST_FANOUT", "99"}}));
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  Config expected;
  expected.cast_fanout = 8;
  expected.log_fold = false;
  expected.spawn_timeout = milliseconds(10'000);
  expected.transport = "tcp";
  EXPECT_EQ(*c, expected);

  for (const auto& [text, value] : {std::pair{"1", true}, {"true", true}, {"0", false}, {"false", false}}) {
    Config base;
    base.log_fold = !value;
    EXPECT_EQ(Config::from_env(base, fake_env({{"SCEPTRE_LOG_FOLD", text}}))->log_fold, value) << text;
  }
}

TEST(Config, FromEnvNamesTheVariableOfABadValue) {
  for (const auto& [var, value] : {std::pair{"SCEPTRE_LOG_FOLD", "yes"}, {"SCEPTRE_CAST_FANOUT", "8k"},
                                   {"SCEPTRE_STOP_TIMEOUT", "5 s"}, {"SCEPTRE_TRANSPORT", "UNIX"}}) {
    auto c = Config::from_env({}, fake_env({{var, value}}));
    ASSERT_FALSE(c.ok()) << var;
    EXPECT_EQ(c.error().code(), Code::kInvalidArgument);
    EXPECT_EQ(c.error().message().rfind(var, 0), 0u) << c.error().message();
  }
}

// A file in the temporary directory, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& contents)
      : path_(std::filesystem::temp_directory_path() /
              ("sceptre_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_++) +
               ".json")) {
    std::ofstream(path_) << contents;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int next_ = 0;
  std::filesystem::path path_;
};

TEST(Config, FromFileReadsJsonAndNamesThePathOnError) {
  TempFile good(R"({"cast_fanout": 4})");
  auto c = Config::from_file(good.path());
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->cast_fanout, 4u);

  auto missing = Config::from_file("/nonexistent/sceptre.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), Code::kNotFound);
  EXPECT_NE(missing.error().to_string().find("/nonexistent/sceptre.json"), std::string::npos);

  TempFile bad(R"({"cast_fanout": 1})");
  auto invalid = Config::from_file(bad.path());
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.error().code(), Code::kInvalidArgument);
  EXPECT_NE(invalid.error().to_string().find(bad.path()), std::string::npos);
  EXPECT_NE(invalid.error().to_string().find("cast_fanout"), std::string::npos);
}

TEST(Config, LoadAppliesFileThenConfigTextThenVariables) {
  TempFile file(R"({"cast_fanout": 4, "spawn_timeout": "1s", "transport": "tcp"})");
  auto c = Config::load(fake_env({{"SCEPTRE_CONFIG_FILE", file.path()},
                                  {"SCEPTRE_CONFIG", R"({"cast_fanout": 6, "spawn_timeout": "2s"})"},
                                  {"SCEPTRE_CAST_FANOUT", "8"}}));
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->cast_fanout, 8u);                     // the variable wins
  EXPECT_EQ(c->spawn_timeout, milliseconds(2'000));  // SCEPTRE_CONFIG over the file
  EXPECT_EQ(c->transport, "tcp");                    // the file over the defaults
  EXPECT_EQ(c->stop_timeout, Config{}.stop_timeout);

  EXPECT_EQ(*Config::load(fake_env({})), Config{});
}

TEST(Config, ConfigHandedToProcsReproducesTheController) {
  Config controller = all_changed();
  auto proc = Config::load(fake_env({{"SCEPTRE_CONFIG", controller.to_json()}}));
  ASSERT_TRUE(proc.ok()) << proc.error().to_string();
  EXPECT_EQ(*proc, controller);
}

TEST(Config, LoadSaysWhichSourceIsBad) {
  auto c = Config::load(fake_env({{"SCEPTRE_CONFIG", R"({"transport": "udp"})"}}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().to_string().find("SCEPTRE_CONFIG"), std::string::npos) << c.error().to_string();
  auto f = Config::load(fake_env({{"SCEPTRE_CONFIG_FILE", "/nonexistent/sceptre.json"}}));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), Code::kNotFound);
  EXPECT_NE(f.error().to_string().find("SCEPTRE_CONFIG_FILE"), std::string::npos);
}

TEST(Config, DescribeIsAMarkdownTableOfEveryField) {
  std::string table = Config::describe();
  const auto has = [&](std::string_view row) { return table.find(row) != std::string::npos; };
  EXPECT_EQ(table.rfind("| Field | Environment variable | Type | Default | Meaning |\n"
                        "|---|---|---|---|---|\n", 0),
            0u);
  EXPECT_TRUE(has("| `cast_fanout` | `SCEPTRE_CAST_FANOUT` | integer >= 2 | `16` | "));
  EXPECT_TRUE(has("| `spawn_timeout` | `SCEPTRE_SPAWN_TIMEOUT` | duration >= 1ms | `30s` | "));
  EXPECT_TRUE(has("| `transport` | `SCEPTRE_TRANSPORT` | `unix`, `tcp` or `netns` | `unix` | "));
  EXPECT_TRUE(has("| `log_fold` | `SCEPTRE_LOG_FOLD` | bool | `true` | "));
}

TEST(Config, DocsCarryTheCurrentTable) {
  std::ifstream in(std::string(SCEPTRE_SOURCE_DIR) + "/docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md not found under " << SCEPTRE_SOURCE_DIR;
  std::stringstream doc;
  doc << in.rdbuf();
  EXPECT_NE(doc.str().find(Config::describe()), std::string::npos)
      << "docs/configuration.md is out of date; its table must be:\n"
      << Config::describe();
}

}  // namespace
}  // namespace sceptre
