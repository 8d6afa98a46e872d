// Tests of cloudformation/workers.yml: that it wires the worker's knobs to
// parameters whose defaults and ranges agree with the code's knob table
// (and docs/DEPLOY.md's parameter table with both), and that every resource,
// property and reference in it exists in AWS's CloudFormation resource
// specification (the npm package @aws-cdk/cfnspec, fetched by
// scripts/fetch-npm.sh, from make deps).
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/serve.h"
#include "cfn_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "serve/config.h"
#include "serve/retirement.h"

namespace cfdb::worker {
namespace {

using Json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kTemplatePath[] = CFDB_WORKERS_TEMPLATE;
constexpr char kSpecPath[] = CFDB_CFNSPEC_JSON;

using tools::AsIntrinsic;
using tools::Intrinsic;
using tools::ParseNumber;
using tools::SpecValidator;
using tools::SubNames;

// The spec is large; parse it once per process.
const Json* Spec() {
  static const Json* spec = []() -> const Json* {
    std::optional<Json> loaded = tools::LoadSpec(kSpecPath);
    return loaded ? new Json(*std::move(loaded)) : nullptr;
  }();
  return spec;
}

class CloudFormationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kTemplatePath)) << kTemplatePath;
    template_ = YAML::LoadFile(kTemplatePath);
    const YAML::Node definitions =
        template_["Resources"]["TaskDefinition"]["Properties"]
                 ["ContainerDefinitions"];
    ASSERT_TRUE(definitions.IsSequence());
    for (const YAML::Node& definition : definitions) {
      if (definition["Name"].Scalar() == "worker") container_ = definition;
    }
    ASSERT_TRUE(container_) << "no container named worker";
  }

  // Environment returns the container's variable `name`, or a null node.
  YAML::Node Environment(const std::string& name) const {
    for (const YAML::Node& entry : container_["Environment"]) {
      if (entry["Name"].Scalar() == name) return entry["Value"];
    }
    return YAML::Node();
  }

  YAML::Node Parameter(const std::string& name) const {
    return template_["Parameters"][name];
  }

  // KnobParameter is a parameter that feeds a knob of serve.
  struct KnobParameter {
    const Knob* knob;
    std::string name;
    YAML::Node parameter;
  };
  std::vector<KnobParameter> KnobParameters() const;

  YAML::Node template_;
  YAML::Node container_;
};

// KnobOf returns the knob of `serve` read from `variable`, or null.
const Knob* KnobOf(const std::string& variable) {
  for (const Knob* knob : ServeKnobs()) {
    if (knob->variable == variable) return knob;
  }
  return nullptr;
}

// Where the template's default is a deployment's choice, not the code's:
// each is checked to differ from the code's (else it belongs nowhere here)
// and to be a value the worker accepts.
const std::map<std::string, std::string, std::less<>>& DeployChoices() {
  static const auto* choices =
      new std::map<std::string, std::string, std::less<>>{
          // CloudWatch Logs Insights queries JSON by field.
          {"WorkerLogFormat", "json"},
          // The CPU count a Fargate task sees need not match its Cpu.
          {"WorkerMaxConcurrentTasks", "1"},
          // Mutual TLS with admission lists: the API controls, the workers'
          // own certificate only observes (docs/TLS.md).
          {"WorkerTlsAdmitControl", "api.cfdb.internal"},
          {"WorkerTlsAdmitObserve", "worker.cfdb.internal"},
          {"WorkerTlsIdentity", "worker.cfdb.internal"},
      };
  return *choices;
}

// Values every parameter fed to a knob is probed with: whatever the
// template lets through (pattern, Min/Max, AllowedValues) the worker must
// accept, or the task would fail at start.
constexpr const char* kProbes[] = {
    "-1",    "-0.5", "0",     "0.5",   "1",       "2",       "19",   "20",
    "50",    "51",   "60",    "61",    "1024",    "1025",    "2880", "2881",
    "3600",  "3601", "65535", "65536", "1000000", "1000001", "abc",  "true",
    "false", "json", "text",  "1.5",   "60.5"};

// The template's variables, parameters and defaults against the code's knob
// table (src/serve/knobs.cc), every one of them.
TEST_F(CloudFormationTest, EveryWorkerVariableIsAKnobOfServe) {
  int knobs = 0;
  for (const YAML::Node& entry : container_["Environment"]) {
    const std::string name = entry["Name"].Scalar();
    if (!name.starts_with("CFDB_WORKER_")) continue;
    const Knob* knob = KnobOf(name);
    EXPECT_NE(knob, nullptr) << name << " is no knob of serve: the worker "
                             << "would ignore it";
    if (knob == nullptr || entry["Value"].Tag() == "!Ref") continue;
    ++knobs;
    EXPECT_TRUE(CheckKnobValue(*knob, name, entry["Value"].Scalar()).ok())
        << name << "=" << entry["Value"].Scalar();
  }
  EXPECT_GE(knobs, 1);
}

std::vector<CloudFormationTest::KnobParameter>
CloudFormationTest::KnobParameters() const {
  std::vector<KnobParameter> fed;
  for (const YAML::Node& entry : container_["Environment"]) {
    const Knob* knob = KnobOf(entry["Name"].Scalar());
    if (knob == nullptr || entry["Value"].Tag() != "!Ref") continue;
    const std::string name = entry["Value"].Scalar();
    const YAML::Node parameter = Parameter(name);
    EXPECT_TRUE(parameter) << name;
    if (parameter) fed.push_back({knob, name, parameter});
  }
  return fed;
}

TEST_F(CloudFormationTest, EveryKnobParameterDefaultsAsTheCodeDoes) {
  std::set<std::string> choices_seen;
  int checked = 0;
  for (const auto& [knob, name, parameter] : KnobParameters()) {
    ASSERT_TRUE(parameter["Default"]) << name << " has no Default";
    const std::string fallback = parameter["Default"].Scalar();
    ++checked;
    EXPECT_TRUE(CheckKnobValue(*knob, name, fallback).ok())
        << name << ": " << fallback;
    const std::string code = KnobDefaultText(*knob);
    if (auto choice = DeployChoices().find(name);
        choice != DeployChoices().end()) {
      choices_seen.insert(name);
      EXPECT_EQ(fallback, choice->second) << name;
      EXPECT_NE(fallback, code) << name << " defaults as the code does now: "
                                << "drop it from DeployChoices";
      continue;
    }
    if (knob->type == KnobType::kSeconds || knob->type == KnobType::kInteger) {
      // A computed default: the code's at the other knobs' defaults.
      const double expected =
          knob->flag == "--max-lifetime-jitter-seconds"
              ? ToSeconds(ServeConfig{}.retirement.max_lifetime_jitter)
              : ParseNumber(code).value_or(std::nan(""));
      EXPECT_EQ(ParseNumber(fallback), expected)
          << name << ": the template says " << fallback << ", the code "
          << (code.empty() ? std::string(knob->default_note) : code);
    } else {
      EXPECT_EQ(fallback, code) << name;
    }
  }
  EXPECT_GE(checked, 20);
  for (const auto& [name, value] : DeployChoices()) {
    EXPECT_TRUE(choices_seen.contains(name)) << name << " feeds no knob";
  }
}

TEST_F(CloudFormationTest, EveryValueAKnobParameterAllowsTheWorkerAccepts) {
  for (const auto& [knob, name, parameter] : KnobParameters()) {
    std::vector<std::string> probes(std::begin(kProbes), std::end(kProbes));
    for (const char* bound : {"Default", "MinValue", "MaxValue"}) {
      if (parameter[bound]) probes.push_back(parameter[bound].Scalar());
    }
    std::set<std::string> allowed;
    for (const YAML::Node& value : parameter["AllowedValues"]) {
      allowed.insert(value.Scalar());
      probes.push_back(value.Scalar());
    }
    std::optional<std::regex> pattern;
    if (parameter["AllowedPattern"]) {
      pattern.emplace(parameter["AllowedPattern"].Scalar());
    }
    const bool number = parameter["Type"].Scalar() == "Number";
    for (const std::string& probe : probes) {
      const std::optional<double> value = ParseNumber(probe);
      if (number && !value) continue;
      if (pattern && !std::regex_search(probe, *pattern)) continue;
      if (!allowed.empty() && !allowed.contains(probe)) continue;
      if (parameter["MinValue"] &&
          !(value && *value >= parameter["MinValue"].as<double>())) {
        continue;
      }
      if (parameter["MaxValue"] &&
          !(value && *value <= parameter["MaxValue"].as<double>())) {
        continue;
      }
      const absl::Status accepted =
          CheckKnobValue(*knob, knob->variable, probe);
      EXPECT_TRUE(accepted.ok())
          << name << " lets '" << probe << "' through: " << accepted;
    }
    if (knob->type == KnobType::kChoice) {
      EXPECT_EQ(allowed, std::set<std::string>(knob->choices.begin(),
                                               knob->choices.end()))
          << name << ": AllowedValues are the knob's choices";
    }
  }
}

// WholeNumberRange is the range a whole-number String parameter states in
// its ConstraintDescription ("a whole number, 1..1024", "whole minutes,
// 1..2880"), if it does.
std::optional<std::pair<int64_t, int64_t>> WholeNumberRange(
    const YAML::Node& parameter) {
  static const std::regex kRange(
      R"(^(?:a whole number|whole \w+), ([0-9]+)\.\.([0-9]+)$)");
  std::smatch m;
  const std::string text =
      parameter["ConstraintDescription"].as<std::string>("");
  if (!std::regex_match(text, m, kRange)) return std::nullopt;
  return std::make_pair(std::stoll(m[1]), std::stoll(m[2]));
}

// A parameter feeding a whole-number knob takes every whole number of the
// range it states, which lies within the knob's, and nothing else: a
// CloudFormation Number takes fractions (and has no pattern), so these are
// Strings with an AllowedPattern.
TEST_F(CloudFormationTest, WholeNumberParametersTakeExactlyTheirRange) {
  int checked = 0;
  for (const auto& [knob, name, parameter] : KnobParameters()) {
    if (knob->type != KnobType::kInteger) continue;
    ++checked;
    EXPECT_EQ(parameter["Type"].Scalar(), "String") << name;
    ASSERT_TRUE(parameter["AllowedPattern"]) << name;
    const auto range = WholeNumberRange(parameter);
    ASSERT_TRUE(range) << name << ": ConstraintDescription states no range";
    const auto [lo, hi] = *range;
    EXPECT_GE(lo, knob->range.min) << name << " allows what the worker refuses";
    EXPECT_LE(hi, knob->range.max) << name << " allows what the worker refuses";
    ASSERT_LE(hi - lo, 1'000'000) << name << ": a range to walk";
    const std::regex pattern(parameter["AllowedPattern"].Scalar());
    for (int64_t v = lo - 2; v <= hi + 2; ++v) {
      EXPECT_EQ(std::regex_match(std::to_string(v), pattern),
                v >= lo && v <= hi)
          << name << " and " << v;
    }
    for (const char* other : {"1.5", "01", "+1", "1e3", " 1", ""}) {
      EXPECT_FALSE(std::regex_match(other, pattern)) << name << ": " << other;
    }
  }
  EXPECT_GE(checked, 3);
}

// DeployRow is one row of docs/DEPLOY.md's parameter table.
struct DeployRow {
  std::vector<std::string> parameters;  // one, or several sharing the row
  std::string feeds, fallback, meaning;
};

// Backticked returns the `quoted` words of `cell`.
std::vector<std::string> Backticked(const std::string& cell) {
  static const std::regex kQuoted("`([^`]+)`");
  std::vector<std::string> words;
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), kQuoted);
       it != std::sregex_iterator(); ++it) {
    words.push_back((*it)[1].str());
  }
  return words;
}

std::vector<DeployRow> DeployTable() {
  std::ifstream in(CFDB_DEPLOY_DOC);
  std::vector<DeployRow> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("| parameter | feeds | default | meaning |")) {
      inside = true;
      continue;
    }
    if (!inside || line.starts_with("| ---")) continue;
    if (!line.starts_with("|")) break;
    std::vector<std::string> cells;
    for (size_t at = 1; at < line.size();) {
      const size_t bar = line.find(" |", at);
      if (bar == std::string::npos) break;
      std::string cell = line.substr(at, bar - at);
      cell.erase(0, cell.find_first_not_of(' '));
      cells.push_back(cell);
      at = bar + 2;
    }
    if (cells.size() != 4) {
      ADD_FAILURE() << "not 4 cells: " << line;
      continue;
    }
    rows.push_back({Backticked(cells[0]), cells[1], cells[2], cells[3]});
  }
  return rows;
}

// DEPLOY's parameter table, row by row: every parameter of the template
// once, with the variables it feeds, its default, and its range.
TEST_F(CloudFormationTest, DeployTableListsEveryParameterAsTheTemplateHasIt) {
  const std::vector<DeployRow> rows = DeployTable();
  ASSERT_FALSE(rows.empty()) << CFDB_DEPLOY_DOC << " has no parameter table";
  // Which variables each parameter feeds.
  std::map<std::string, std::set<std::string>> feeds;
  for (const YAML::Node& entry : container_["Environment"]) {
    if (entry["Value"].Tag() == "!Ref") {
      feeds[entry["Value"].Scalar()].insert(entry["Name"].Scalar());
    }
  }
  std::set<std::string> listed;
  for (const DeployRow& row : rows) {
    for (const std::string& name : row.parameters) {
      EXPECT_TRUE(listed.insert(name).second) << name << " listed twice";
      const YAML::Node parameter = Parameter(name);
      EXPECT_TRUE(parameter) << name << " is not in the template";
      if (!parameter) continue;
      std::set<std::string> variables;
      for (const std::string& word : Backticked(row.feeds)) {
        if (word.starts_with("CFDB_WORKER_")) variables.insert(word);
      }
      EXPECT_EQ(variables, feeds[name]) << name << ": feeds " << row.feeds;
      if (!parameter["Default"]) {
        EXPECT_EQ(row.fallback, "(required)") << name;
        continue;
      }
      const std::string fallback = parameter["Default"].Scalar();
      EXPECT_TRUE(row.fallback == fallback ||
                  row.fallback.starts_with(fallback + " ("))
          << name << ": DEPLOY says " << row.fallback << ", the template "
          << fallback;
      if (parameter["MinValue"] && parameter["MaxValue"]) {
        EXPECT_THAT(row.meaning,
                    HasSubstr(parameter["MinValue"].Scalar() + ".." +
                              parameter["MaxValue"].Scalar()))
            << name;
      } else if (const auto range = WholeNumberRange(parameter)) {
        EXPECT_THAT(row.meaning,
                    HasSubstr(absl::StrCat(range->first, "..", range->second)))
            << name;
      } else if (variables.size() == 1) {
        const Knob* knob = KnobOf(*variables.begin());
        ASSERT_NE(knob, nullptr) << *variables.begin();
        if (knob->type == KnobType::kSeconds ||
            knob->type == KnobType::kInteger) {
          EXPECT_THAT(row.meaning, HasSubstr(KnobRangeText(*knob))) << name;
        }
      }
    }
  }
  for (const auto& parameter : template_["Parameters"]) {
    EXPECT_TRUE(listed.contains(parameter.first.Scalar()))
        << parameter.first.Scalar() << " is missing from DEPLOY's table";
  }
}

TEST_F(CloudFormationTest, WorkerVariablesComeFromParameters) {
  // Fixed by the platform, not tuned per environment.
  const std::set<std::string> kLiterals = {
      "CFDB_WORKER_HOST", "CFDB_WORKER_TLS_CA_ENV", "CFDB_WORKER_TLS_CERT_ENV",
      "CFDB_WORKER_TLS_KEY_ENV"};
  int knobs = 0;
  for (const YAML::Node& entry : container_["Environment"]) {
    const std::string name = entry["Name"].Scalar();
    if (!name.starts_with("CFDB_WORKER_")) continue;
    const YAML::Node value = entry["Value"];
    if (kLiterals.contains(name)) {
      EXPECT_NE(value.Tag(), "!Ref") << name;
      continue;
    }
    ++knobs;
    EXPECT_EQ(value.Tag(), "!Ref") << name << " is not a !Ref";
    EXPECT_TRUE(Parameter(value.Scalar()))
        << name << " refers to missing parameter " << value.Scalar();
  }
  EXPECT_GE(knobs, 3);
  EXPECT_EQ(Environment("CFDB_WORKER_HOST").Scalar(), "0.0.0.0");
}

// Issue 13: the API may control, the workers' own (shared) certificate may
// only observe, so one leaked worker key cannot dispatch or stop anything.
TEST_F(CloudFormationTest, AdmitsControlAndObserveIdentitiesSeparately) {
  const YAML::Node control = Environment("CFDB_WORKER_TLS_ADMIT_CONTROL");
  const YAML::Node observe = Environment("CFDB_WORKER_TLS_ADMIT_OBSERVE");
  ASSERT_TRUE(control && observe);
  EXPECT_EQ(control.Scalar(), "WorkerTlsAdmitControl");
  EXPECT_EQ(observe.Scalar(), "WorkerTlsAdmitObserve");
  const std::string control_default =
      Parameter("WorkerTlsAdmitControl")["Default"].Scalar();
  const std::string observe_default =
      Parameter("WorkerTlsAdmitObserve")["Default"].Scalar();
  const std::string worker_identity =
      Parameter("WorkerTlsIdentity")["Default"].Scalar();
  EXPECT_EQ(observe_default, worker_identity)
      << "the self-poll and the health check present the worker's own "
         "certificate";
  EXPECT_THAT(control_default, Not(HasSubstr(worker_identity)))
      << "the worker's own identity must not control";
  EXPECT_EQ(Parameter("WorkerLogFormat")["Default"].Scalar(), "json");
  EXPECT_EQ(Environment("CFDB_WORKER_LOG_FORMAT").Scalar(), "WorkerLogFormat");
}

TEST_F(CloudFormationTest, TlsMaterialComesFromSecrets) {
  const YAML::Node secrets = container_["Secrets"];
  ASSERT_TRUE(secrets.IsSequence());
  std::set<std::string> names;
  for (const YAML::Node& secret : secrets) {
    names.insert(secret["Name"].Scalar());
    EXPECT_EQ(secret["ValueFrom"].Tag(), "!Ref");
    const YAML::Node parameter = Parameter(secret["ValueFrom"].Scalar());
    ASSERT_TRUE(parameter) << secret["ValueFrom"].Scalar();
    EXPECT_FALSE(parameter["Default"]) << "a secret ARN has no default";
  }
  EXPECT_EQ(names, (std::set<std::string>{"CFDB_WORKER_TLS_CA_PEM",
                                          "CFDB_WORKER_TLS_CERT_PEM",
                                          "CFDB_WORKER_TLS_KEY_PEM"}));
  // The worker reads them itself: each is named by its *_ENV knob, and no
  // shell in between leaves them in another process's environment.
  for (const char* pem : {"CFDB_WORKER_TLS_CA_PEM", "CFDB_WORKER_TLS_CERT_PEM",
                          "CFDB_WORKER_TLS_KEY_PEM"}) {
    const std::string knob =
        std::string(pem).replace(std::string(pem).rfind("_PEM"), 4, "_ENV");
    EXPECT_EQ(Environment(knob).Scalar(), pem);
  }
  EXPECT_FALSE(container_["EntryPoint"]) << "the image's own entry point";
  EXPECT_FALSE(container_["Command"]);
}

TEST_F(CloudFormationTest, TheWorkerStartsAsRootToDropAndKeepsFewCapabilities) {
  EXPECT_EQ(container_["User"].Scalar(), "0");
  std::set<std::string> dropped;
  for (const YAML::Node& cap :
       container_["LinuxParameters"]["Capabilities"]["Drop"]) {
    dropped.insert(cap.Scalar());
  }
  for (const char* cap : {"CHOWN", "DAC_OVERRIDE", "FOWNER", "NET_RAW"}) {
    EXPECT_TRUE(dropped.contains(cap)) << cap;
  }
  for (const char* cap : {"SETUID", "SETGID", "KILL"}) {
    EXPECT_FALSE(dropped.contains(cap)) << cap << " is what jobs need";
  }
}

TEST_F(CloudFormationTest, EveryParameterIsUsed) {
  // Every name a Ref or Sub mentions, anywhere in the template.
  std::set<std::string> used;
  std::vector<YAML::Node> pending = {template_["Resources"],
                                     template_["Outputs"]};
  while (!pending.empty()) {
    const YAML::Node node = pending.back();
    pending.pop_back();
    if (std::optional<Intrinsic> call = AsIntrinsic(node)) {
      const YAML::Node& arg = call->argument;
      if (call->function == "Ref" && arg.IsScalar()) used.insert(arg.Scalar());
      if (call->function == "Fn::Sub") {
        const YAML::Node text = arg.IsSequence() ? arg[0] : arg;
        for (const std::string& name : SubNames(text.Scalar())) {
          used.insert(name);
        }
      }
      if (arg.IsScalar()) continue;
    }
    if (node.IsSequence()) {
      for (const YAML::Node& item : node) pending.push_back(item);
    } else if (node.IsMap()) {
      for (const auto& entry : node) pending.push_back(entry.second);
    }
  }
  for (const auto& parameter : template_["Parameters"]) {
    EXPECT_TRUE(used.contains(parameter.first.Scalar()))
        << parameter.first.Scalar() << " is never used";
  }
}

TEST_F(CloudFormationTest, NumericParametersStateUnitAndRange) {
  static const std::regex kUnit(
      R"(\b(seconds|minutes|MiB|CPU units|days|TCP port|jobs)\b)",
      std::regex::icase);
  static const std::regex kRange(R"([0-9]+\.\.[0-9]+|>=|<=|any number)");
  for (const auto& entry : template_["Parameters"]) {
    const std::string name = entry.first.Scalar();
    const std::string description =
        entry.second["Description"].as<std::string>("");
    EXPECT_FALSE(description.empty()) << name << " has no Description";
    const YAML::Node fallback = entry.second["Default"];
    if (!fallback || !ParseNumber(fallback.Scalar())) continue;
    EXPECT_TRUE(std::regex_search(description, kUnit))
        << name << " does not state its unit: " << description;
    EXPECT_TRUE(std::regex_search(description, kRange))
        << name << " does not state its range: " << description;
  }
}

TEST_F(CloudFormationTest, IdleTimeoutDescriptionStatesSizingConstraint) {
  const std::string description =
      Parameter("WorkerIdleTimeoutSeconds")["Description"].Scalar();
  EXPECT_THAT(description, HasSubstr("retry interval"));
  EXPECT_THAT(description, HasSubstr("cold start"));
}

TEST_F(CloudFormationTest, StopTimeoutOutlastsSignalDrainAndKillGrace) {
  const int stop_timeout = container_["StopTimeout"].as<int>();
  EXPECT_LE(stop_timeout, 120) << "Fargate's maximum";
  const double signal_grace =
      Parameter("WorkerSignalGraceSeconds")["MaxValue"].as<double>();
  const double kill_grace =
      Parameter("WorkerTaskKillGraceSeconds")["MaxValue"].as<double>();
  // After the drain and the cancel, calls in progress get kCallsGrace.
  const double calls_grace = static_cast<double>(kCallsGrace.count());
  EXPECT_GT(stop_timeout, signal_grace + kill_grace + calls_grace);
  // DEPLOY's sum, written out for operators, is this one.
  std::ifstream in(CFDB_DEPLOY_DOC);
  const std::string doc((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  EXPECT_THAT(doc,
              HasSubstr(absl::StrCat(signal_grace, " + ", kill_grace, " + ",
                                     calls_grace, " < ", stop_timeout)));
  EXPECT_THAT(doc, HasSubstr(absl::StrCat("gives calls in progress up to ",
                                          calls_grace, " s")));
}

TEST_F(CloudFormationTest, ContainerRunsUnderInitWithHealthCheck) {
  EXPECT_TRUE(container_["LinuxParameters"]["InitProcessEnabled"].as<bool>());
  const YAML::Node command = container_["HealthCheck"]["Command"];
  ASSERT_TRUE(command.IsSequence());
  ASSERT_EQ(command.size(), 5u);
  EXPECT_EQ(command[0].Scalar(), "CMD");
  EXPECT_EQ(command[1].Scalar(), "cfdb-worker");
  EXPECT_EQ(command[2].Scalar(), "health");
  EXPECT_EQ(command[3].Scalar(), "--address");
  EXPECT_EQ(command[4].Tag(), "!Sub");
  EXPECT_EQ(command[4].Scalar(), "127.0.0.1:${ContainerPort}");
}

TEST_F(CloudFormationTest, OnlyTheApiReachesTheWorkerPort) {
  const YAML::Node ingress = template_["Resources"]["SecurityGroup"]
                                      ["Properties"]["SecurityGroupIngress"];
  ASSERT_TRUE(ingress.IsSequence());
  ASSERT_EQ(ingress.size(), 1u);
  const YAML::Node rule = ingress[0];
  EXPECT_EQ(rule["SourceSecurityGroupId"].Scalar(), "ApiSecurityGroupId");
  EXPECT_EQ(rule["FromPort"].Scalar(), "ContainerPort");
  EXPECT_EQ(rule["ToPort"].Scalar(), "ContainerPort");
  EXPECT_FALSE(rule["CidrIp"]);
  EXPECT_FALSE(rule["CidrIpv6"]);
}

TEST_F(CloudFormationTest, RolesGrantNoMoreThanNeeded) {
  const YAML::Node task_role = template_["Resources"]["TaskRole"]["Properties"];
  EXPECT_FALSE(task_role["ManagedPolicyArns"]);
  // Nothing, unless scale-in protection is on: then the two actions the ECS
  // agent calls for it.
  const YAML::Node policies = task_role["Policies"];
  ASSERT_TRUE(policies);
  ASSERT_EQ(policies.Tag(), "!If");
  EXPECT_EQ(policies[0].Scalar(), "ScaleInProtection");
  EXPECT_EQ(policies[2].Tag(), "!Ref");
  EXPECT_EQ(policies[2].Scalar(), "AWS::NoValue");
  ASSERT_EQ(policies[1].size(), 1u);
  const YAML::Node statements = policies[1][0]["PolicyDocument"]["Statement"];
  ASSERT_EQ(statements.size(), 1u);
  EXPECT_EQ(statements[0]["Action"].as<std::vector<std::string>>(),
            (std::vector<std::string>{"ecs:UpdateTaskProtection",
                                      "ecs:GetTaskProtection"}));

  const YAML::Node execution =
      template_["Resources"]["ExecutionRole"]["Properties"];
  EXPECT_FALSE(execution["ManagedPolicyArns"]);
  const std::set<std::string> kAllowed = {"ecr:GetAuthorizationToken",
                                          "ecr:BatchCheckLayerAvailability",
                                          "ecr:BatchGetImage",
                                          "ecr:GetDownloadUrlForLayer",
                                          "logs:CreateLogStream",
                                          "logs:PutLogEvents",
                                          "secretsmanager:GetSecretValue"};
  for (const YAML::Node& policy : execution["Policies"]) {
    for (const YAML::Node& statement : policy["PolicyDocument"]["Statement"]) {
      std::vector<std::string> actions;
      if (statement["Action"].IsScalar()) {
        actions.push_back(statement["Action"].Scalar());
      } else {
        actions = statement["Action"].as<std::vector<std::string>>();
      }
      for (const std::string& action : actions) {
        EXPECT_TRUE(kAllowed.contains(action)) << action;
      }
      const YAML::Node resource = statement["Resource"];
      if (resource.IsScalar() && resource.Tag() != "!Ref" &&
          resource.Tag() != "!GetAtt") {
        // Only the registry token has no resource-level form.
        EXPECT_EQ(resource.Scalar(), "*");
        EXPECT_THAT(actions, ElementsAre("ecr:GetAuthorizationToken"));
      }
    }
  }
}

class CloudFormationSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = Spec();
    ASSERT_NE(spec_, nullptr)
        << "CloudFormation resource specification missing at " << kSpecPath
        << "; run make deps (scripts/fetch-npm.sh)";
    ASSERT_TRUE(spec_->contains("ResourceTypes"));
    ASSERT_TRUE(spec_->contains("PropertyTypes"));
  }

  std::vector<std::string> ValidateText(const std::string& yaml) const {
    return SpecValidator(*spec_).Validate(YAML::Load(yaml));
  }

  const Json* spec_ = nullptr;
};

// A valid template the bad ones below each break in one place.
constexpr char kGoodTemplate[] = R"(
Parameters:
  VpcId:
    Type: String
Resources:
  Group:
    Type: AWS::EC2::SecurityGroup
    Properties:
      GroupDescription: test
      VpcId: !Ref VpcId
  Task:
    Type: AWS::ECS::TaskDefinition
    Properties:
      ContainerDefinitions:
        - Name: worker
          Image: example
          HealthCheck:
            Command: [CMD, "true"]
          StopTimeout: 30
Outputs:
  GroupId:
    Value: !GetAtt Group.GroupId
)";

std::string Replace(std::string text, const std::string& from,
                    const std::string& to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// The template itself is checked by the tool (cfn_validate_workers_template,
// tests/serve/cloudformation.cmake), as an operator who edits it runs it.

TEST_F(CloudFormationSpecTest, ValidatorAcceptsGoodTemplate) {
  EXPECT_THAT(ValidateText(kGoodTemplate), IsEmpty());
}

TEST_F(CloudFormationSpecTest, ValidatorRejectsMisspelledProperty) {
  EXPECT_THAT(
      ValidateText(Replace(kGoodTemplate, "      VpcId:", "      VpcID:")),
      ElementsAre("Resources.Group.Properties.VpcID: unknown property "
                  "of AWS::EC2::SecurityGroup"));
}

TEST_F(CloudFormationSpecTest, ValidatorRejectsMisspelledNestedProperty) {
  EXPECT_THAT(
      ValidateText(Replace(kGoodTemplate, "Command: [CMD", "Comand: [CMD")),
      ElementsAre(
          "Resources.Task.Properties.ContainerDefinitions[0].HealthCheck."
          "Comand: unknown property of AWS::ECS::TaskDefinition.HealthCheck"));
}

TEST_F(CloudFormationSpecTest, ValidatorRejectsMisplacedProperty) {
  // StopTimeout belongs to the container, not to the task definition.
  const std::string text =
      Replace(Replace(kGoodTemplate, "          StopTimeout: 30\n", ""),
              "      ContainerDefinitions:",
              "      StopTimeout: 30\n      ContainerDefinitions:");
  EXPECT_THAT(ValidateText(text),
              ElementsAre("Resources.Task.Properties.StopTimeout: unknown "
                          "property of AWS::ECS::TaskDefinition"));
}

TEST_F(CloudFormationSpecTest, ValidatorRejectsWrongShape) {
  EXPECT_THAT(ValidateText(Replace(kGoodTemplate, "StopTimeout: 30",
                                   "StopTimeout: soon")),
              ElementsAre("Resources.Task.Properties.ContainerDefinitions[0]."
                          "StopTimeout: 'soon' is not an Integer"));
  EXPECT_THAT(ValidateText(Replace(kGoodTemplate, "Command: [CMD, \"true\"]",
                                   "Command: {CMD: true}")),
              ElementsAre("Resources.Task.Properties.ContainerDefinitions[0]."
                          "HealthCheck.Command: expected a List"));
}

TEST_F(CloudFormationSpecTest, ValidatorRejectsUnknownResourceType) {
  EXPECT_THAT(ValidateText(Replace(kGoodTemplate, "AWS::ECS::TaskDefinition",
                                   "AWS::ECS::TaskDefinitions")),
              ElementsAre("Resources.Task.Type: unknown resource type "
                          "'AWS::ECS::TaskDefinitions'"));
}

TEST_F(CloudFormationSpecTest, ValidatorRejectsMissingRequiredProperty) {
  EXPECT_THAT(
      ValidateText(
          Replace(kGoodTemplate, "      GroupDescription: test\n", "")),
      ElementsAre("Resources.Group.Properties: missing required property "
                  "'GroupDescription' of AWS::EC2::SecurityGroup"));
}

TEST_F(CloudFormationSpecTest, ValidatorRejectsDanglingReferences) {
  EXPECT_THAT(ValidateText(Replace(kGoodTemplate, "!Ref VpcId", "!Ref Vpc")),
              ElementsAre("Resources.Group.Properties.VpcId: reference to "
                          "undefined 'Vpc'"));
  EXPECT_THAT(
      ValidateText(Replace(kGoodTemplate, "Group.GroupId", "Group.Id")),
      ElementsAre("Outputs.GroupId.Value: AWS::EC2::SecurityGroup has no "
                  "attribute 'Id'"));
  EXPECT_THAT(ValidateText(Replace(kGoodTemplate, "Image: example",
                                   "Image: !Sub \"${Registry}/worker\"")),
              ElementsAre("Resources.Task.Properties.ContainerDefinitions[0]."
                          "Image: reference to undefined 'Registry'"));
}

}  // namespace
}  // namespace cfdb::worker
