# motor-bb-runner: the generated code of src/bbrunner/proto, the service library, the binary.
set(MOTOR_BB_PROTO_DIR ${CMAKE_CURRENT_SOURCE_DIR}/src/bbrunner/proto)
set(MOTOR_BB_GEN_DIR ${CMAKE_BINARY_DIR}/bbrunner_proto)
file(MAKE_DIRECTORY ${MOTOR_BB_GEN_DIR})
set(MOTOR_BB_GEN_SRCS)
foreach(name runner resourceusage motor_job)
  set(out ${MOTOR_BB_GEN_DIR}/${name}.pb.cc ${MOTOR_BB_GEN_DIR}/${name}.pb.h)
  set(plugin_args)
  if(name STREQUAL "runner")
    list(APPEND out ${MOTOR_BB_GEN_DIR}/${name}.grpc.pb.cc ${MOTOR_BB_GEN_DIR}/${name}.grpc.pb.h)
    set(plugin_args --grpc_out=${MOTOR_BB_GEN_DIR} --plugin=protoc-gen-grpc=${MOTOR_GRPC_CPP_PLUGIN})
  endif()
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${Protobuf_PROTOC_EXECUTABLE} --proto_path=${MOTOR_BB_PROTO_DIR} --cpp_out=${MOTOR_BB_GEN_DIR}
            ${plugin_args} ${MOTOR_BB_PROTO_DIR}/${name}.proto
    DEPENDS ${MOTOR_BB_PROTO_DIR}/${name}.proto
    COMMENT "protoc ${name}.proto")
  list(FILTER out INCLUDE REGEX "\\.cc$")
  list(APPEND MOTOR_BB_GEN_SRCS ${out})
endforeach()
# Generated code: not held to our warnings; its headers are included as system headers.
add_library(motor_bb_proto STATIC ${MOTOR_BB_GEN_SRCS})
target_include_directories(motor_bb_proto SYSTEM PUBLIC ${MOTOR_BB_GEN_DIR})
target_link_libraries(motor_bb_proto PUBLIC PkgConfig::GRPCPP protobuf::libprotobuf)

motor_library(motor_bbrunner bbrunner)
target_link_libraries(motor_bbrunner PUBLIC motor_protocol motor_gate motor_bb_proto Threads::Threads)

add_executable(motor-bb-runner src/bbrunner/main.cpp)
target_link_libraries(motor-bb-runner PRIVATE motor_bbrunner)
target_compile_options(motor-bb-runner PRIVATE ${MOTOR_WARNINGS})
