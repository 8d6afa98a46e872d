// cfn-validate SPEC TEMPLATE...: checks each CloudFormation template against
// AWS's resource specification (tools/cfn_spec.h) and prints one
// "TEMPLATE: path: problem" line per error. Exits 0 when every template is
// valid, 1 when one is not, 2 when the spec or a template cannot be read.
//
//   build/tests/cfn-validate build/cfnspec/node_modules/@aws-cdk/cfnspec/
//     spec/specification.json cloudformation/workers.yml   (one line)
#include <exception>
#include <iostream>

#include "cfn_spec.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: cfn-validate SPEC TEMPLATE...\n";
    return 2;
  }
  std::optional<cfdb::tools::Json> spec;
  try {
    spec = cfdb::tools::LoadSpec(argv[1]);
  } catch (const std::exception& e) {
    std::cerr << "cfn-validate: " << argv[1] << ": not JSON: " << e.what()
              << "\n";
    return 2;
  }
  if (!spec) {
    std::cerr << "cfn-validate: " << argv[1]
              << ": cannot read it (make deps fetches it)\n";
    return 2;
  }
  const cfdb::tools::SpecValidator validator(*spec);
  int rc = 0;
  for (int i = 2; i < argc; ++i) {
    YAML::Node tmpl;
    try {
      tmpl = YAML::LoadFile(argv[i]);
    } catch (const std::exception& e) {
      std::cerr << "cfn-validate: " << argv[i] << ": " << e.what() << "\n";
      return 2;
    }
    for (const std::string& error : validator.Validate(tmpl)) {
      std::cout << argv[i] << ": " << error << "\n";
      rc = 1;
    }
  }
  if (rc == 0) std::cout << "cfn-validate: " << argc - 2 << " valid\n";
  return rc;
}
