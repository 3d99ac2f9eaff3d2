/* The installed C ABI (dlcache::c, libdlcache_c.so) from C: its version
 * is the headers', and a connect to a socket nobody serves fails cleanly.
 *   consumer_c SOCKET */
#include <dlcache/dlcache_c.h>
#include <dlcache/version.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  dlc_options options;
  dlc_client* client = NULL;
  int rc;
  if (argc != 2) {
    fprintf(stderr, "usage: consumer_c SOCKET\n");
    return 2;
  }
  if (strcmp(dlc_version(), DLCACHE_VERSION_STRING) != 0) {
    fprintf(stderr, "dlc_version() %s, headers %s\n", dlc_version(),
            DLCACHE_VERSION_STRING);
    return 1;
  }
  dlc_options_init(&options);
  options.socket_path = argv[1];
  options.connect_timeout_s = 0.1;
  rc = dlc_connect_with_options(&options, &client);
  if (rc == DLC_OK) {
    fprintf(stderr, "connected to %s, which nobody serves\n", argv[1]);
    dlc_close(client);
    return 1;
  }
  printf("consumer_c: libdlcache_c %s; connect: %s (%s)\n", dlc_version(),
         dlc_status_name(rc), dlc_last_error());
  return 0;
}
