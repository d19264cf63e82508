// tandem-convert: an ONNX model as Tandem's graph JSON and params file, to
// read, diff or deploy without the importer; or a Tandem model as ONNX.
//
//   tandem-convert resnet18.onnx out/resnet18   # out/resnet18.json + out/resnet18.<crc>.params
//   tandem-convert cnn.json cnn.onnx            # serialization/onnx_export.h
//
// The model is imported as tandem-run and tandem::import_onnx import it (so
// what the importer refuses is listed the same way), then exported as a
// model Tandem traced would be (serialization/model.h). A bad file is a
// one-line error and exit status 1; bad arguments, usage and status 2.
#include <iostream>
#include <string>

#include "core/error.h"
#include "serialization/onnx_import.h"

int main(int argc, char** argv) {
  const std::string in = argc == 3 ? argv[1] : "", out = argc == 3 ? argv[2] : "";
  const bool to_onnx = in.ends_with(".json") && out.ends_with(".onnx");
  if (!to_onnx && !in.ends_with(".onnx")) {
    std::cerr << "usage: tandem-convert MODEL.onnx OUT    writes OUT.json and its params file\n"
                 "       tandem-convert MODEL.json OUT.onnx\n";
    return 2;
  }
  try {
    if (to_onnx) {
      tandem::load(in).export_onnx(out);
      std::cout << "wrote " << out << "\n";
    } else {
      tandem::import_onnx(in).export_model(out);
      std::cout << "wrote " << out << ".json\n";
    }
  } catch (const tandem::Error& e) {
    std::cerr << "tandem-convert: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
