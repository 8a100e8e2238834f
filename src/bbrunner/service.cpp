#include "bbrunner/service.hpp"

#include <simdjson.h>

#include "bbrunner/runner_link.hpp"

namespace motor::bbrunner {

grpc::Status RunnerService::CheckReadiness(grpc::ServerContext*, const buildbarn::runner::CheckReadinessRequest* request,
                                           google::protobuf::Empty*) {
  if (auto st = build_.check_exists(request->path()); !st) return {grpc::StatusCode::INTERNAL, st.error().message};
  auto answer = call(settings_.runner_socket, R"({"id":1,"method":"runner.status","params":{}})", std::chrono::seconds(5));
  if (!answer) return {grpc::StatusCode::UNAVAILABLE, answer.error().message};
  simdjson::dom::parser parser;
  simdjson::dom::element result;
  if (parser.parse(*answer).at_key("result").get(result)) {
    return {grpc::StatusCode::UNAVAILABLE, "motor-runner refused runner.status: " + *answer};
  }
  auto flag = [&](const char* key) {
    bool value = false;
    return !result.at_key(key).get_bool().get(value) && value;
  };
  auto number = [&](const char* key, int64_t fallback) {
    int64_t value = 0;
    return result.at_key(key).get_int64().get(value) ? fallback : value;
  };
  const bool draining = flag("draining"), shutting_down = flag("shutting_down");
  const int64_t free_bytes = number("disk_free_bytes", -1), floor_bytes = number("disk_free_floor_bytes", 0);
  if (draining || shutting_down) return {grpc::StatusCode::UNAVAILABLE, "motor-runner is draining and takes no new jobs"};
  if (free_bytes >= 0 && free_bytes < floor_bytes)
    return {grpc::StatusCode::UNAVAILABLE, "motor-runner's workspace filesystem is below its free-space floor"};
  return grpc::Status::OK;
}

grpc::Status RunnerService::Run(grpc::ServerContext* context, const buildbarn::runner::RunRequest* request,
                                buildbarn::runner::RunResponse* reply) {
  return run_action(settings_, build_, *context, *request, *reply);
}

}  // namespace motor::bbrunner
