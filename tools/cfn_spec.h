// A check of a CloudFormation template against AWS's resource
// specification (the npm package @aws-cdk/cfnspec's specification.json,
// which scripts/fetch-npm.sh installs): SpecValidator, and the template
// helpers it reads intrinsics with. Used by tools/cfn_validate.cc (the
// command the template tests run) and by tests/serve/cloudformation_test.cc.
// Header-only; not part of the worker.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace cfdb::tools {

using Json = nlohmann::json;

// Parses a whole string as a number; nullopt if any of it is not one.
inline std::optional<double> ParseNumber(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

// Intrinsic is a CloudFormation function call in either YAML form: a tag
// (`!GetAtt A.B`) or a one-key map (`{Fn::GetAtt: [A, B]}`).
struct Intrinsic {
  std::string function;  // "Ref" or "Fn::Name"
  YAML::Node argument;
};

inline std::optional<Intrinsic> AsIntrinsic(const YAML::Node& node) {
  const std::string& tag = node.Tag();
  // Untagged nodes carry "?" (plain) or "!" (quoted).
  if (tag.size() > 1 && tag[0] == '!') {
    const std::string name = tag.substr(1);
    return Intrinsic{name == "Ref" ? name : "Fn::" + name, node};
  }
  if (node.IsMap() && node.size() == 1) {
    const std::string key = node.begin()->first.Scalar();
    if (key == "Ref" || key.starts_with("Fn::")) {
      return Intrinsic{key, node.begin()->second};
    }
  }
  return std::nullopt;
}

// SubNames returns the names a Fn::Sub string interpolates ("${X}", "${A.B}";
// "${!X}" is a literal).
inline std::vector<std::string> SubNames(const std::string& text) {
  static const std::regex kName(R"(\$\{([^!}][^}]*)\})");
  std::vector<std::string> names;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kName);
       it != std::sregex_iterator(); ++it) {
    names.push_back((*it)[1].str());
  }
  return names;
}

// SpecValidator checks a template against the CloudFormation resource
// specification: each resource's Type; the name of every property, at the
// top level and inside nested property types; required properties; the
// shape of each value (list, map, structure, number, boolean); and that each
// Ref, GetAtt and Sub names a parameter, resource, attribute or pseudo
// parameter that exists. Values computed by intrinsics are not checked
// further. Does not take ownership of the spec; it must outlive the
// validator.
class SpecValidator {
 public:
  explicit SpecValidator(const Json& spec) : spec_(spec) {}

  // Validate returns one "path: problem" line per error; empty if none.
  std::vector<std::string> Validate(const YAML::Node& tmpl) const {
    std::vector<std::string> errors;
    static const std::set<std::string> kSections = {"AWSTemplateFormatVersion",
                                                    "Description",
                                                    "Metadata",
                                                    "Parameters",
                                                    "Rules",
                                                    "Mappings",
                                                    "Conditions",
                                                    "Transform",
                                                    "Resources",
                                                    "Outputs"};
    if (!tmpl.IsMap()) return {"template: not a map"};
    for (const auto& section : tmpl) {
      if (!kSections.contains(section.first.Scalar())) {
        errors.push_back(section.first.Scalar() + ": unknown template section");
      }
    }
    const YAML::Node resources = tmpl["Resources"];
    if (!resources.IsMap() || resources.size() == 0) {
      errors.push_back("Resources: missing or empty");
      return errors;
    }
    for (const auto& entry : resources) {
      CheckResource(entry.first.Scalar(), entry.second, errors);
    }
    for (const char* section : {"Resources", "Outputs", "Conditions"}) {
      if (tmpl[section]) CheckReferences(tmpl, tmpl[section], section, errors);
    }
    return errors;
  }

 private:
  void CheckResource(const std::string& name, const YAML::Node& resource,
                     std::vector<std::string>& errors) const {
    static const std::set<std::string> kAttributes = {"Type",
                                                      "Properties",
                                                      "DependsOn",
                                                      "Condition",
                                                      "Metadata",
                                                      "DeletionPolicy",
                                                      "UpdateReplacePolicy",
                                                      "CreationPolicy",
                                                      "UpdatePolicy"};
    const std::string path = "Resources." + name;
    if (!resource.IsMap()) {
      errors.push_back(path + ": not a map");
      return;
    }
    for (const auto& key : resource) {
      if (!kAttributes.contains(key.first.Scalar())) {
        errors.push_back(path + "." + key.first.Scalar() +
                         ": unknown resource attribute");
      }
    }
    const std::string type = resource["Type"] ? resource["Type"].Scalar() : "";
    const Json& types = spec_.at("ResourceTypes");
    auto it = types.find(type);
    if (it == types.end()) {
      errors.push_back(path + ".Type: unknown resource type '" + type + "'");
      return;
    }
    CheckStructure(type, type, *it, resource["Properties"],
                   path + ".Properties", errors);
  }

  // CheckStructure checks a map of properties against `definition` (a
  // resource type or a property type named `type_name`). A missing map is
  // fine unless something in it is required.
  void CheckStructure(const std::string& resource_type,
                      const std::string& type_name, const Json& definition,
                      const YAML::Node& value, const std::string& path,
                      std::vector<std::string>& errors) const {
    if (value && AsIntrinsic(value)) return;
    if (value && !value.IsMap()) {
      errors.push_back(path + ": expected a map (" + type_name + ")");
      return;
    }
    static const Json kNoProperties = Json::object();
    const Json& properties = definition.contains("Properties")
                                 ? definition["Properties"]
                                 : kNoProperties;
    for (const auto& [property, descriptor] : properties.items()) {
      if (descriptor.value("Required", false) && !(value && value[property])) {
        errors.push_back(path + ": missing required property '" + property +
                         "' of " + type_name);
      }
    }
    if (!value) return;
    for (const auto& entry : value) {
      const std::string property = entry.first.Scalar();
      auto it = properties.find(property);
      if (it == properties.end()) {
        errors.push_back(path + "." + property + ": unknown property of " +
                         type_name);
        continue;
      }
      CheckValue(resource_type, *it, entry.second, path + "." + property,
                 errors);
    }
  }

  // CheckValue checks one value against a property descriptor (PrimitiveType,
  // or Type with ItemType/PrimitiveItemType for List and Map, or Type naming
  // a property type).
  void CheckValue(const std::string& resource_type, const Json& descriptor,
                  const YAML::Node& value, const std::string& path,
                  std::vector<std::string>& errors) const {
    if (AsIntrinsic(value)) return;
    if (descriptor.contains("PrimitiveType")) {
      CheckPrimitive(descriptor["PrimitiveType"], value, path, errors);
      return;
    }
    if (!descriptor.contains("Type")) return;  // the spec says nothing
    const std::string type = descriptor["Type"];
    if (type == "List" || type == "Map") {
      if (type == "List" ? !value.IsSequence() : !value.IsMap()) {
        errors.push_back(path + ": expected a " + type);
        return;
      }
      int index = 0;
      for (const auto& item : value) {
        const YAML::Node element =
            type == "List" ? YAML::Node(item) : item.second;
        const std::string element_path =
            type == "List" ? path + "[" + std::to_string(index++) + "]"
                           : path + "." + item.first.Scalar();
        if (AsIntrinsic(element)) continue;
        if (descriptor.contains("PrimitiveItemType")) {
          CheckPrimitive(descriptor["PrimitiveItemType"], element, element_path,
                         errors);
        } else if (descriptor.contains("ItemType")) {
          CheckNamed(resource_type, descriptor["ItemType"], element,
                     element_path, errors);
        }
      }
      return;
    }
    CheckNamed(resource_type, type, value, path, errors);
  }

  // CheckNamed checks a value against the property type `name`, looked up as
  // "<resource type>.<name>" and then as a global type (e.g. "Tag").
  void CheckNamed(const std::string& resource_type, const std::string& name,
                  const YAML::Node& value, const std::string& path,
                  std::vector<std::string>& errors) const {
    const Json& types = spec_.at("PropertyTypes");
    auto it = types.find(resource_type + "." + name);
    if (it == types.end()) it = types.find(name);
    if (it == types.end()) {
      errors.push_back(path + ": the spec lacks property type " + name);
      return;
    }
    if (it->contains("Properties")) {
      CheckStructure(resource_type, it.key(), *it, value, path, errors);
    } else {
      CheckValue(resource_type, *it, value, path, errors);  // an alias
    }
  }

  static void CheckPrimitive(const std::string& type, const YAML::Node& value,
                             const std::string& path,
                             std::vector<std::string>& errors) {
    if (type == "Json") return;
    if (!value.IsScalar()) {
      errors.push_back(path + ": expected a " + type);
      return;
    }
    const std::string& text = value.Scalar();
    if ((type == "Integer" || type == "Long") &&
        !std::regex_match(text, std::regex("-?[0-9]+"))) {
      errors.push_back(path + ": '" + text + "' is not an " + type);
    } else if (type == "Double" && !ParseNumber(text)) {
      errors.push_back(path + ": '" + text + "' is not a Double");
    } else if (type == "Boolean" && text != "true" && text != "false") {
      errors.push_back(path + ": '" + text + "' is not a Boolean");
    }
  }

  // CheckReferences walks `node` for Ref, GetAtt and Sub and checks that
  // each names something the template or CloudFormation defines.
  void CheckReferences(const YAML::Node& tmpl, const YAML::Node& node,
                       const std::string& path,
                       std::vector<std::string>& errors) const {
    if (std::optional<Intrinsic> call = AsIntrinsic(node)) {
      const YAML::Node& arg = call->argument;
      if (call->function == "Ref" && arg.IsScalar()) {
        CheckName(tmpl, arg.Scalar(), path, errors);
      } else if (call->function == "Fn::GetAtt") {
        std::string target;
        if (arg.IsScalar()) target = arg.Scalar();
        if (arg.IsSequence() && arg.size() == 2 && arg[0].IsScalar() &&
            arg[1].IsScalar()) {
          target = arg[0].Scalar() + "." + arg[1].Scalar();
        }
        CheckAttribute(tmpl, target, path, errors);
      } else if (call->function == "Fn::Sub") {
        const YAML::Node text = arg.IsSequence() ? arg[0] : arg;
        const YAML::Node vars = arg.IsSequence() ? arg[1] : YAML::Node();
        if (text.IsScalar()) {
          for (const std::string& name : SubNames(text.Scalar())) {
            if (vars && vars.IsMap() && vars[name]) continue;
            if (name.find('.') != std::string::npos) {
              CheckAttribute(tmpl, name, path, errors);
            } else {
              CheckName(tmpl, name, path, errors);
            }
          }
        }
        if (vars) CheckReferences(tmpl, vars, path, errors);
        return;
      }
      if (arg.IsScalar()) return;
    }
    if (node.IsSequence()) {
      for (std::size_t i = 0; i < node.size(); ++i) {
        CheckReferences(tmpl, node[i], path + "[" + std::to_string(i) + "]",
                        errors);
      }
    } else if (node.IsMap()) {
      for (const auto& entry : node) {
        CheckReferences(tmpl, entry.second, path + "." + entry.first.Scalar(),
                        errors);
      }
    }
  }

  static void CheckName(const YAML::Node& tmpl, const std::string& name,
                        const std::string& path,
                        std::vector<std::string>& errors) {
    static const std::set<std::string> kPseudo = {
        "AWS::AccountId", "AWS::NotificationARNs", "AWS::NoValue",
        "AWS::Partition", "AWS::Region",           "AWS::StackId",
        "AWS::StackName", "AWS::URLSuffix"};
    if (kPseudo.contains(name)) return;
    if (tmpl["Parameters"] && tmpl["Parameters"][name]) return;
    if (tmpl["Resources"] && tmpl["Resources"][name]) return;
    errors.push_back(path + ": reference to undefined '" + name + "'");
  }

  void CheckAttribute(const YAML::Node& tmpl, const std::string& target,
                      const std::string& path,
                      std::vector<std::string>& errors) const {
    const std::size_t dot = target.find('.');
    const std::string resource = target.substr(0, dot);
    const YAML::Node found =
        tmpl["Resources"] ? tmpl["Resources"][resource] : YAML::Node();
    if (dot == std::string::npos || !found || !found["Type"]) {
      errors.push_back(path + ": GetAtt of undefined '" + target + "'");
      return;
    }
    const std::string attribute = target.substr(dot + 1);
    const Json& types = spec_.at("ResourceTypes");
    auto type = types.find(found["Type"].Scalar());
    if (type == types.end()) return;  // reported by CheckResource
    if (!type->contains("Attributes") ||
        !(*type)["Attributes"].contains(attribute)) {
      errors.push_back(path + ": " + found["Type"].Scalar() +
                       " has no attribute '" + attribute + "'");
    }
  }

  const Json& spec_;
};

// LoadSpec parses the specification at `path`; nullopt if it cannot be
// read. Throws nlohmann::json::parse_error if it is not JSON.
inline std::optional<Json> LoadSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  return Json::parse(in);
}

}  // namespace cfdb::tools
