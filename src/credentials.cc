#include "cfdb/worker/credentials.h"

namespace cfdb::worker {

std::string Credentials::Key() const { return "insecure"; }

}  // namespace cfdb::worker
