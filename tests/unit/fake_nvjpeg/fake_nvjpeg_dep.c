/* fake_nvjpeg.c's dependency, in the same folder and off the loader's
 * path: version 13.0.1 (libraryPropertyType 0, 1, 2). */
int fake_nvjpeg_dep_version(int which) {
  return which == 0 ? 13 : which == 1 ? 0 : 1;
}
