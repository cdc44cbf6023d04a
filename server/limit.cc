#include "server/limit.h"

namespace sophon {

const char* LimitName(Limit limit) { return RefusalName(limit); }

}  // namespace sophon
