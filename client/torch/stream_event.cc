#include "client/torch/stream_event.h"

#include <chrono>
#include <thread>

namespace sophon {

void StreamEvent::Wait() {
  // What the host waits for here (a batch's copy, a step's end) takes
  // milliseconds: polling every 20 us costs nothing that matters.
  while (!event_.query()) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

}  // namespace sophon
